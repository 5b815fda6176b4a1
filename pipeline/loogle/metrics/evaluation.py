"""`make loogle-metrics ARGS="predictions=<file> task=<task>"`: ``python -m pipeline.commands.loogle_metrics``
(Hydra overrides of ``conf/loogle_metrics.yaml``): a predictions file scored with LooGLE's metrics and
printed. This project's files are checked against the questions they were made from (``data=``); the
repository's ``Output/`` files carry their answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError
from pipeline.files import recorded_path
from pipeline.formats import fmt
from pipeline.loogle.data.questions import check_task
from pipeline.loogle.data.reading import DataSource, fingerprint, load_questions
from pipeline.loogle.generation.predictions import Scored, check_ours, is_ours, official_pairs, read_lines
from pipeline.loogle.metrics.reorder import reorder_scores
from pipeline.loogle.metrics.task_scores import score_task
from pipeline.results.loogle import METRIC_LABELS as LABELS


def source_of(plain: dict[str, Any]) -> DataSource:
    return DataSource(str(plain["data"]), str(plain["dataset"]), plain.get("revision"))


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


def result_lines(result: dict[str, Any]) -> list[str]:
    lines = [f"task          {result['task']}  ({result['n_questions']} questions; {result['format']})"]
    for name, value in result["metrics"].items():
        reason = result["unavailable"].get(name)
        lines.append(f"{LABELS[name]:<14}{fmt(value)}" + (f"  ({reason})" if reason else ""))
    reorder = result.get("reorder")
    if reorder and reorder["n_questions"]:
        values = ", ".join(f"{k} {fmt(v)}" for k, v in reorder["metrics"].items())
        lines.append(f"reorder       {values} over {reorder['n_questions']} timeline questions")
    return lines
