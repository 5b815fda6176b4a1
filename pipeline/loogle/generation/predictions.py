"""Predictions files: this project's (one JSON line per question) and the LooGLE repository's ``Output/``
format (one line per document: ``llm_output`` and ``output`` lists, with ``qa_pairs`` or ``question``).

This project's lines carry the task, the data's fingerprint and the run's settings, so a file is never
scored against other questions, and a killed run resumes where it stopped: the file is rewritten whole
and atomically after each question, so it never holds a torn line."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError
from pipeline.files import write_bytes_atomic
from pipeline.loogle.data.questions import jsonl_rows, kind_of, literal

OURS = {"task", "data", "fingerprint", "qid", "prediction"}


@dataclass(frozen=True)
class Scored:
    """One prediction with its reference answer (and question and its type, where the file has them)."""

    prediction: Any
    answer: Any
    question: str = ""
    kind: str | None = None


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise PipelineError(f"predictions file {path} does not exist")
    rows = jsonl_rows(path)
    if not rows:
        raise PipelineError(f"predictions file {path} is empty: no prediction to score")
    if not all(isinstance(row, dict) for row in rows):
        raise PipelineError(f"predictions file {path}: expected one JSON object per line")
    return rows


def is_ours(rows: list[dict[str, Any]]) -> bool:
    return set(rows[0]) >= OURS


def check_ours(rows: list[dict[str, Any]], task: str, fingerprint: str, n_questions: int, where: str) -> None:
    """This project's predictions: all of ``task``, of the questions with ``fingerprint``, one per
    question."""
    for number, row in enumerate(rows, start=1):
        if not set(row) >= OURS:
            raise PipelineError(
                f"{where}, line {number}: not a LooGLE predictions line (no {OURS - set(row)})"
            )
        if row["task"] != task:
            raise PipelineError(
                f"{where} holds predictions of task {row['task']}, not {task}: pass task={row['task']}"
            )
        if row["fingerprint"] != fingerprint:
            raise PipelineError(
                f"{where} holds predictions of other questions (data {row['data']}, fingerprint "
                f"{row['fingerprint']}; these are {fingerprint}): pass the data it was made from (data=...)"
            )
    qids = [row["qid"] for row in rows]
    if len(set(qids)) != len(qids) or len(qids) != n_questions:
        raise PipelineError(
            f"{where} has {len(set(qids))} distinct predictions ({len(qids)} lines) for {n_questions} "
            "questions: finish the run (make loogle resumes it) or pass the file of a whole run"
        )


def official_pairs(rows: list[dict[str, Any]], task: str, where: str) -> list[Scored]:
    """The repository's ``Output/`` format, one line per document, flattened in order."""
    out: list[Scored] = []
    for number, row in enumerate(rows, start=1):
        here = f"{where}, line {number}"
        outputs, answers = row.get("llm_output"), row.get("output")
        if not isinstance(outputs, list) or not isinstance(answers, list):
            raise PipelineError(f"{here}: not a predictions line (ours or LooGLE's Output/ format)")
        if len(outputs) != len(answers):
            raise PipelineError(f"{here}: {len(outputs)} predictions for {len(answers)} answers")
        pairs = row.get("qa_pairs", row.get("question"))
        if isinstance(pairs, str) and pairs != "none":
            pairs = literal(pairs, f"qa_pairs of {here}")
        check_official_task(task, pairs, answers, here)
        pairs = pairs if isinstance(pairs, list) else [{}] * len(answers)
        questions = [(p.get("Q", ""), kind_of(p.get("type"))) for p in pairs]
        out += [Scored(h, a, q, k) for h, a, (q, k) in zip(outputs, answers, questions, strict=False)]
    return out


def check_official_task(task: str, pairs: Any, answers: list[Any], here: str) -> None:
    """The line's shape fits ``task``: summarization has no questions, the others one per answer, and a
    cloze answer is a mapping."""
    if task == "longdep_summarization" and pairs != "none":
        raise PipelineError(f"{here}: has questions, so it is not of task longdep_summarization")
    if task != "longdep_summarization" and (not isinstance(pairs, list) or len(pairs) != len(answers)):
        raise PipelineError(f"{here}: no question per answer, so it is not of task {task}")
    mappings = all(isinstance(a, dict) and all(isinstance(v, str) for v in a.values()) for a in answers)
    if (task == "shortdep_cloze") != mappings:
        kind = "mappings of masks to entities" if task == "shortdep_cloze" else "text"
        raise PipelineError(f"{here}: its answers are not {kind}, so it is not of task {task}")


def write_lines(path: Path, rows: list[dict[str, Any]]) -> None:
    """The whole file, atomically."""
    text = "".join(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n" for row in rows)
    write_bytes_atomic(path, text.encode("utf-8"))


def resumed(path: Path, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The lines a killed run left (none for a new file); a file of another run is an error."""
    if not path.exists():
        return []
    rows = jsonl_rows(path)
    for row in rows:
        theirs = {key: row.get(key) for key in settings}
        if theirs != settings:
            differ = ", ".join(f"{k}={theirs[k]} (now {v})" for k, v in settings.items() if theirs[k] != v)
            raise PipelineError(
                f"{path} holds predictions of another run ({differ}): pass predictions=<another file>, "
                "or remove it to start again"
            )
    return rows
