"""A predictions file evaluated with LooGLE's metrics (`make loogle-metrics ARGS="predictions=<file>
task=<task>"`, ``conf/loogle_metrics.yaml``; and each task of `make loogle`). This project's files are
checked against the questions they were made from (``data=``); the repository's ``Output/`` files carry
their answers. `make loogle-metrics` appends its result at full precision to ``results=`` (a line of
``pipeline.results.loogle``, keyed by the file's model identity, task, questions and settings)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pydantic.dataclasses

from pipeline.errors import PipelineError
from pipeline.files import recorded_path
from pipeline.loogle.data.questions import check_task
from pipeline.loogle.data.reading import DataSource, fingerprint, load_questions
from pipeline.loogle.generation.predictions import (
    Scored,
    check_ours,
    check_shape,
    is_ours,
    official_pairs,
    read_lines,
)
from pipeline.loogle.metrics.reorder import check_timeline, reorder_scores
from pipeline.loogle.metrics.task_scores import bertscore_mode, score_task
from pipeline.outputs import Output, check
from pipeline.provenance import json_sha256
from pipeline.results import loogle as loogle_lines

# What a predictions line of `make loogle` records of its run (``answering.RunSettings.record``).
RUN_SETTINGS = ("task", "data", "fingerprint", "model", "max_length", "max_new_tokens", "limit")
RUN_SETTINGS += ("repetition_penalty",)


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
    results: str = "artifacts/results/loogle.jsonl"

    @property
    def source(self) -> DataSource:
        return DataSource(self.data, self.dataset, self.revision)


def needs_hub(options: MetricsOptions) -> bool:
    """Whether the file's metrics need the Hub: its data there, or a BERTScore download asked for."""
    return options.source.data == "hub" or bertscore_mode(options.bertscore) == "true"


def evaluate_file(options: MetricsOptions) -> dict[str, Any]:
    """The file's metrics (its command stays offline unless ``needs_hub``), its results line appended
    to ``options.results`` (checked first: ``pipeline.outputs``): the result, with ``appended_to``."""
    mode = bertscore_mode(options.bertscore)
    results = check(Output("results", Path(options.results), loogle_lines.KIND))
    wall, cpu = time.perf_counter(), time.process_time()
    path = Path(options.predictions)
    pairs, kind = scored_pairs(path, check_task(options.task), options.source)
    name, model, settings = file_identity(path, options.task)
    result = scores(path, options.task, pairs, kind, mode)
    seconds, cpu_seconds = time.perf_counter() - wall, time.process_time() - cpu
    row = loogle_lines.loogle_row(name, model, result, settings, seconds, cpu_seconds, "make loogle-metrics")
    loogle_lines.append(results, row)
    return {**result, "appended_to": str(results.path), "result_id": row["result_id"]}


def file_identity(path: Path, task: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """What the results line of a predictions file records of its model and run, checked before any
    scoring to be what a results line holds: this project's file by the model record, name and run
    settings its lines carry (an older file without a record: its model's name); a file of LooGLE's
    ``Output/`` format by its name, its questions by a hash of its questions and answers."""
    rows = read_lines(path)
    if is_ours(rows):
        check_shape(rows, str(path))
        first = rows[0]
        settings = {key: first.get(key) for key in RUN_SETTINGS}
        model = first.get("model_record") or {"spec": first["model"], "kind": "named in predictions"}
        name = first["model"]
    else:
        pairs = official_pairs(rows, task, str(path))
        fingerprint = json_sha256([[p.question, p.answer] for p in pairs])[:12]
        settings = {"task": task, "data": loogle_lines.OUTPUT_DATA, "fingerprint": fingerprint}
        model, name = {"spec": path.stem, "kind": "named in predictions"}, path.stem
    empty = {"task": task, "n_questions": 1, "metrics": {}, "unavailable": {}, "predictions": ""}
    line = loogle_lines.loogle_row(name, model, empty, settings, 0, 0, "make loogle-metrics")
    loogle_lines.check(line, f"{path}, line 1 (what its results line would hold)")
    return name, model, settings


def scored_pairs(path: Path, task: str, source: DataSource) -> tuple[list[Scored], str]:
    """The file's predictions with their answers, and which format it is in."""
    rows = read_lines(path)
    if not is_ours(rows):
        return official_pairs(rows, task, str(path)), "LooGLE's Output/ format"
    check_shape(rows, str(path))
    tasks = sorted({row["task"] for row in rows})
    if tasks != [task]:
        raise PipelineError(
            f"{path} holds predictions of task {', '.join(tasks)}, not {task}: pass task={tasks[0]}"
        )
    limit = rows[0].get("limit")  # a run of the first N questions of each task
    questions = load_questions(task, source)[: limit or None]
    check_ours(rows, task, fingerprint(questions), [q.qid for q in questions], str(path))
    by_qid = {row["qid"]: row["prediction"] for row in rows}
    return [Scored(by_qid[q.qid], q.answer, q.question, q.kind) for q in questions], f"data {source.label}"


def evaluate(path: Path, task: str, source: DataSource, bertscore: str) -> dict[str, Any]:
    """The metrics of a predictions file of ``task`` (its questions read from ``source``)."""
    return scores(path, task, *scored_pairs(path, check_task(task), source), bertscore)


def scores(path: Path, task: str, pairs: list[Scored], kind: str, bertscore: str) -> dict[str, Any]:
    """The metrics of ``pairs`` (a timeline question that is no order refused first)."""
    check_timeline(task, pairs)  # before BERTScore's model loads
    result = score_task(task, pairs, bertscore)
    if task == "longdep_qa":
        result["reorder"] = reorder_scores(pairs)
    return {**result, "task": task, "predictions": recorded_path(path), "format": kind}
