"""A predictions file evaluated with LooGLE's metrics (`make loogle-metrics ARGS="predictions=<file>
task=<task>"`, ``conf/loogle_metrics.yaml``; and each task of `make loogle`). This project's files are
checked against the questions they were made from (``data=``); the repository's ``Output/`` files carry
their answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic.dataclasses

from pipeline.errors import PipelineError
from pipeline.files import recorded_path
from pipeline.hub import offline_unless
from pipeline.loogle.data.questions import check_task
from pipeline.loogle.data.reading import DataSource, fingerprint, load_questions
from pipeline.loogle.generation.predictions import Scored, check_ours, is_ours, official_pairs, read_lines
from pipeline.loogle.metrics.reorder import reorder_scores
from pipeline.loogle.metrics.task_scores import bertscore_mode, score_task


@pydantic.dataclasses.dataclass(frozen=True)
class MetricsOptions:
    """`make loogle-metrics`'s settings: the predictions file, its task, the data it was made from and
    whether BERTScore is computed (auto, true, false)."""

    predictions: str
    task: str
    data: str
    dataset: str
    revision: str | None = None
    bertscore: str | bool = "auto"

    @property
    def source(self) -> DataSource:
        return DataSource(self.data, self.dataset, self.revision)


def evaluate_file(options: MetricsOptions) -> dict[str, Any]:
    """The file's metrics (offline unless the Hub's data or a BERTScore download is asked for)."""
    mode = bertscore_mode(options.bertscore)
    offline_unless(options.source.data == "hub", mode == "true")
    return evaluate(Path(options.predictions), options.task, options.source, mode)


def scored_pairs(path: Path, task: str, source: DataSource) -> tuple[list[Scored], str]:
    """The file's predictions with their answers, and which format it is in."""
    rows = read_lines(path)
    if not is_ours(rows):
        return official_pairs(rows, task, str(path)), "LooGLE's Output/ format"
    tasks = sorted({str(row.get("task")) for row in rows})
    if tasks != [task]:
        raise PipelineError(
            f"{path} holds predictions of task {', '.join(tasks)}, not {task}: pass task={tasks[0]}"
        )
    limit = rows[0].get("limit")  # a run of the first N questions of each task
    questions = load_questions(task, source)[: limit or None]
    check_ours(rows, task, fingerprint(questions), len(questions), str(path))
    by_qid = {row["qid"]: row["prediction"] for row in rows}
    return [Scored(by_qid[q.qid], q.answer, q.question) for q in questions], f"data {source.label}"


def evaluate(path: Path, task: str, source: DataSource, bertscore: str) -> dict[str, Any]:
    pairs, kind = scored_pairs(path, check_task(task), source)
    result = score_task(task, pairs, bertscore)
    if task == "longdep_qa":
        result["reorder"] = reorder_scores(pairs)
    return {**result, "task": task, "predictions": recorded_path(path), "format": kind}
