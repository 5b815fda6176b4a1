"""Predictions files: this project's (one JSON line per question) and the LooGLE repository's ``Output/``
format (one line per document: ``llm_output`` and ``output`` lists, with ``qa_pairs`` or ``question``).

This project's lines carry the task, the data's fingerprint and the run's settings, so a file is never
scored against other questions, and a killed run resumes where it stopped: the file is rewritten whole
and atomically after each question, so it never holds a torn line."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pipeline.errors import PipelineError
from pipeline.files import write_bytes_atomic
from pipeline.loogle.data.bounds import (
    MAX_LINE_BYTES,
    MAX_PREDICTION_CHARS,
    MAX_PREDICTION_WORDS,
    MAX_PREDICTIONS_BYTES,
    check_strings,
    json_lines,
    kind,
    text_problem,
)
from pipeline.loogle.data.questions import kind_of, literal
from pipeline.outputs import FileKind
from pipeline.results.keys import model_key

OURS = {"task", "data", "fingerprint", "qid", "prediction"}


@dataclass(frozen=True)
class Scored:
    """One prediction with its reference answer (and question and its type, where the file has them)."""

    prediction: Any
    answer: Any
    question: str = ""
    kind: str | None = None


def read_lines(path: Path) -> list[dict[str, Any]]:
    """A predictions file's lines, each an object (the file within ``MAX_PREDICTIONS_BYTES``, UTF-8)."""
    if not path.exists() and not path.is_symlink():
        raise PipelineError(f"predictions file {path} does not exist")
    rows = []
    for number, row in json_lines(path, "predictions file", MAX_PREDICTIONS_BYTES, MAX_LINE_BYTES):
        if not isinstance(row, dict):
            raise PipelineError(
                f"predictions file {path}, line {number}: expected a JSON object, not {kind(row)}"
            )
        rows.append(row)
    if not rows:
        raise PipelineError(f"predictions file {path} is empty: no prediction to score")
    return rows


def is_ours(rows: list[dict[str, Any]]) -> bool:
    return set(rows[0]) >= OURS


def prediction_problem(value: Any) -> str | None:
    """Why ``value`` is not a prediction this scores (not text, or beyond ``MAX_PREDICTION_CHARS`` or
    ``MAX_PREDICTION_WORDS``), or None."""
    if not isinstance(value, str):
        return f"is {kind(value)}, not text"
    if why := text_problem(value, MAX_PREDICTION_CHARS):
        return why
    if (words := len(value.split())) > MAX_PREDICTION_WORDS:
        return f"holds {words} words, over the limit of {MAX_PREDICTION_WORDS}"
    return None


def check_line(row: dict[str, Any], here: str) -> None:
    """One line of this project's: its fields of their types, its prediction within bounds."""
    for field in ("task", "fingerprint", "qid"):
        if not isinstance(row[field], str):
            raise PipelineError(f"{here}, field {field}: expected a string, not {kind(row[field])}")
    if why := prediction_problem(row["prediction"]):
        raise PipelineError(f"{here}, field prediction: {why}")
    limit = row.get("limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise PipelineError(f"{here}, field limit: {str(limit)[:40]} is not a whole number of questions >= 1")


def check_shape(rows: list[dict[str, Any]], where: str) -> None:
    """Every line is one of this project's, its fields of their types (``check_line``)."""
    for number, row in enumerate(rows, start=1):
        if not set(row) >= OURS:
            raise PipelineError(
                f"{where}, line {number}: not a LooGLE predictions line (no {OURS - set(row)})"
            )
        check_line(row, f"{where}, line {number}")


def check_ours(rows: list[dict[str, Any]], task: str, fingerprint: str, qids: list[str], where: str) -> None:
    """This project's predictions: all of ``task``, of the questions with ``fingerprint`` (whose ids
    are ``qids``), one per question."""
    check_shape(rows, where)
    known = set(qids)
    for number, row in enumerate(rows, start=1):
        if row["task"] != task:
            raise PipelineError(
                f"{where} holds predictions of task {row['task']}, not {task}: pass task={row['task']}"
            )
        if row["fingerprint"] != fingerprint:
            raise PipelineError(
                f"{where} holds predictions of other questions (data {row['data']}, fingerprint "
                f"{row['fingerprint']}; these are {fingerprint}): pass the data it was made from (data=...)"
            )
        if row["qid"] not in known:
            raise PipelineError(
                f"{where}, line {number}, field qid: {row['qid'][:80]!r} names no question of these "
                f"(fingerprint {fingerprint}): the line was edited, or belongs to another file"
            )
    check_distinct(rows, where)
    if len(rows) != len(qids):
        raise PipelineError(
            f"{where} has predictions for {len(rows)} of its {len(qids)} questions: finish the run (make "
            "loogle resumes it) or pass the file of a whole run"
        )


def check_distinct(rows: list[dict[str, Any]], where: str) -> None:
    """One line per question: a question predicted twice (an edit, two files joined) is one line naming
    both lines and the fix, which no run makes for it (make loogle would refuse the same file)."""
    first: dict[Any, int] = {}
    for number, row in enumerate(rows, start=1):
        earlier = first.setdefault(row["qid"], number)
        if earlier != number:
            raise PipelineError(
                f"{where}, line {number}: question {str(row['qid'])[:80]!r} again (first on line {earlier}): "
                f"delete the line of the two whose prediction is not to be scored, or delete the file to run "
                "its questions again"
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
        check_official_values(task, outputs, answers, here)
        pairs = pairs if isinstance(pairs, list) else [{}] * len(answers)
        questions = [
            (p.get("Q", ""), kind_of(p.get("type"), f"{here}, qa_pairs[{i}]")) for i, p in enumerate(pairs)
        ]
        out += [Scored(h, a, q, k) for h, a, (q, k) in zip(outputs, answers, questions, strict=False)]
    return out


def check_official_task(task: str, pairs: Any, answers: list[Any], here: str) -> None:
    """The line's shape fits ``task``: summarization has no questions, the others one per answer (each
    a mapping whose ``Q`` is text), and a cloze answer is a mapping."""
    if task == "longdep_summarization":
        if isinstance(pairs, list):
            raise PipelineError(
                f"{here}: has {len(pairs)} questions (qa_pairs), so it is not of task longdep_summarization"
            )
        if pairs not in ("none", None):
            raise PipelineError(f'{here}, field qa_pairs: {kind(pairs)}, where a summary line has "none"')
    elif not isinstance(pairs, list) or len(pairs) != len(answers):
        raise PipelineError(f"{here}: no question per answer, so it is not of task {task}")
    for index, pair in enumerate(pairs if isinstance(pairs, list) else []):
        if not isinstance(pair, dict) or not isinstance(pair.get("Q", ""), str):
            raise PipelineError(f"{here}, field qa_pairs[{index}]: expected a mapping whose Q is text")
    mappings = all(isinstance(a, dict) and all(isinstance(v, str) for v in a.values()) for a in answers)
    if (task == "shortdep_cloze") != mappings:
        kind_of = "mappings of masks to entities" if task == "shortdep_cloze" else "text"
        raise PipelineError(f"{here}: its answers are not {kind_of}, so it is not of task {task}")


def check_official_values(task: str, outputs: list[Any], answers: list[Any], here: str) -> None:
    """Each prediction within bounds (text, except a cloze prediction, which may be a mapping), each
    answer's strings text within the data's bounds."""
    for index, output in enumerate(outputs):
        if task == "shortdep_cloze" and isinstance(output, dict):
            check_strings(output, here, f"llm_output[{index}]", MAX_PREDICTION_CHARS)
        elif why := prediction_problem(output):
            raise PipelineError(f"{here}, field llm_output[{index}]: {why}")
    check_strings(answers, here, "output")


def foreign_line(stream: IO[bytes]) -> str | None:
    """The first line of ``stream`` that is no line of this project's predictions files, as "line N, ...";
    None when there is none."""
    number = 0
    while data := stream.readline(MAX_LINE_BYTES + 1):
        number += 1
        try:
            row = json.loads(data) if data.strip() else {key: None for key in OURS}
        except (ValueError, RecursionError):
            row = None
        if not isinstance(row, dict) or not set(row) >= OURS:
            return f"line {number}, which is no line of a predictions file"
    return None


# This project's predictions files as an output (``pipeline.outputs``): only their lines; read again,
# line by line, before a run resumes one (``resumed``)
KIND = FileKind("predictions files", "`make loogle`", "predictions.jsonl", foreign_line)


def write_lines(path: Path, rows: list[dict[str, Any]]) -> None:
    """The whole file, atomically."""
    text = "".join(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n" for row in rows)
    write_bytes_atomic(path, text.encode("utf-8"))


def resumed(
    path: Path, settings: dict[str, Any], qids: list[str], model: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The lines a killed run left (none for a new file), each checked like a line `make loogle-metrics`
    reads; a file of another run (other settings, another model's identity, other questions) is an
    error."""
    if not path.exists() and not path.is_symlink():
        return []
    rows = read_lines(path)
    check_shape(rows, f"predictions file {path}")
    check_distinct(rows, f"predictions file {path}")
    for row in rows:
        theirs = {key: row.get(key) for key in settings}
        if theirs != settings:
            differ = ", ".join(f"{k}={theirs[k]} (now {v})" for k, v in settings.items() if theirs[k] != v)
            raise PipelineError(another_run(path, differ))
        if model is not None and model_key(row.get("model_record") or model) != model_key(model):
            raise PipelineError(another_run(path, "another model: its weights, tokenizer or config differ"))
        if row["qid"] not in qids:
            raise PipelineError(
                another_run(path, f"its qid {row['qid'][:80]!r} names no question of this run")
            )
    return rows


def another_run(path: Path, differ: str) -> str:
    return (
        f"{path} holds predictions of another run ({differ}): pass predictions_dir=<another folder>, "
        "or remove the file to start again"
    )
