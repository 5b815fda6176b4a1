"""LooGLE's questions from any of its layouts: the embedded sample (``data/loogle``), a local copy of its
test files, or the Hub dataset at a pinned revision.

Two layouts exist. The published test data (and the Hub dataset's older revisions) hold one row per
document: ``input`` (the text), ``title``, ``qa_pairs`` (a *string* holding a Python literal: a list of
``{Q, A, S[, type]}``; ``"none"`` for summarization, whose answer is ``output``). Later Hub revisions hold
one row per question: ``context``, ``question``, ``answer`` (and a title or id). Both become
``Question``s. ``qa_pairs`` and a cloze answer held as a string are read with ``ast.literal_eval``:
literals only, nothing in the data is ever run.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError
from pipeline.files import DATA_DIR

TASKS = ("shortdep_qa", "longdep_qa", "shortdep_cloze", "longdep_summarization")
SAMPLE_DIR = DATA_DIR / "loogle"
ID_COLUMNS = ("title", "doc_id", "id", "_id")


@dataclass(frozen=True)
class Question:
    """One question of a task: its document, its place there, the text, the question, the answer
    (a string; for cloze a mapping of masks to entities) and its evidence (``S``: the strings an
    annotator copied from the text, or for cloze a summary of the segment; none for summarization)."""

    task: str
    doc_id: str
    index: int
    context: str
    question: str
    answer: str | dict[str, str]
    evidence: tuple[str, ...] = ()
    kind: str | None = None  # the question's type where the data gives one (longdep_qa's ``type``)

    @property
    def qid(self) -> str:
        return f"{self.doc_id}#{self.index}"


def check_task(task: str) -> str:
    if task not in TASKS:
        raise PipelineError(f"setting task={task}: LooGLE's tasks are {', '.join(TASKS)} (or all)")
    return task


def literal(text: str, where: str) -> Any:
    """A Python literal read from ``text`` (never evaluated as code), or a PipelineError naming where."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        detail = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise PipelineError(f"{where}: not a Python literal ({detail}); the row is malformed") from None


def parse_qa_pairs(text: str, where: str) -> list[dict[str, Any]]:
    """``qa_pairs`` of a document row: a list of mappings with ``Q`` and ``A``."""
    pairs = literal(text, f"qa_pairs of {where}")
    if not isinstance(pairs, list) or not pairs:
        raise PipelineError(
            f"qa_pairs of {where}: expected a non-empty list of {{Q, A}}, got {type(pairs).__name__}"
        )
    for number, pair in enumerate(pairs):
        if not isinstance(pair, dict) or not {"Q", "A"} <= set(pair):
            raise PipelineError(f"qa_pairs of {where}, item {number}: expected a mapping with Q and A")
    return pairs


def answer_of(task: str, value: Any, where: str) -> str | dict[str, str]:
    """A checked answer: a cloze answer is a mapping of masks to strings (held as a literal string in
    the question layout), any other task's a string."""
    if task == "shortdep_cloze":
        value = literal(value, f"the cloze answer of {where}") if isinstance(value, str) else value
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise PipelineError(f"the cloze answer of {where}: expected a mapping of masks to entities")
        return {str(k): v for k, v in value.items()}
    if not isinstance(value, str):
        raise PipelineError(f"the answer of {where}: expected a string, got {type(value).__name__}")
    return value


def evidence_of(value: Any, where: str) -> tuple[str, ...]:
    """The evidence of a question: absent, one string, or a list of strings (``S`` of ``qa_pairs``,
    or an ``evidence`` column)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise PipelineError(f"the evidence of {where}: expected a string or a list of strings")
    return tuple(value)


def kind_of(value: Any) -> str | None:
    """A question's type (LooGLE's ``type``), or None when the data gives none."""
    return str(value) if value not in (None, "") else None


def document_questions(task: str, row: dict[str, Any], where: str) -> list[Question]:
    """The questions of one document row (``input``, ``title``, ``qa_pairs``, ``output``)."""
    doc_id, context = str(row.get("title") or where), row["input"]
    if row.get("qa_pairs") == "none":
        return [Question(task, doc_id, 0, context, "", answer_of(task, row.get("output"), where))]
    pairs = parse_qa_pairs(row["qa_pairs"], f"{where} ({doc_id})")
    return [
        Question(
            task,
            doc_id,
            i,
            context,
            str(p["Q"]),
            answer_of(task, p["A"], f"{where} item {i}"),
            evidence_of(p.get("S"), f"{where} item {i}"),
            kind_of(p.get("type")),
        )
        for i, p in enumerate(pairs)
    ]


def question_rows(task: str, rows: Iterable[dict[str, Any]], where: str) -> list[Question]:
    """Questions of the one-row-per-question layout, numbered within their document in order."""
    out: list[Question] = []
    seen: dict[str, int] = {}
    texts: dict[str, str] = {}  # a document without an id column: numbered by its distinct texts
    for number, row in enumerate(rows):
        doc_id = next((str(row[c]) for c in ID_COLUMNS if row.get(c) not in (None, "")), None)
        doc_id = doc_id or texts.setdefault(row["context"], f"doc-{len(texts)}")
        index = seen.get(doc_id, 0)
        seen[doc_id] = index + 1
        question = row.get("question") or ""
        answer = answer_of(task, row["answer"], f"{where} row {number}")
        evidence = evidence_of(row.get("evidence"), f"{where} row {number}")
        kind = kind_of(row.get("type"))
        out.append(Question(task, doc_id, index, row["context"], str(question), answer, evidence, kind))
    return out


def questions_from_rows(task: str, rows: list[dict[str, Any]], where: str) -> list[Question]:
    """Either layout, told apart by its columns."""
    if not rows:
        raise PipelineError(f"{where}: no rows")
    columns = set(rows[0])
    if {"input", "qa_pairs"} <= columns:
        return [q for n, row in enumerate(rows) for q in document_questions(task, row, f"{where} row {n}")]
    if {"context", "answer"} <= columns:
        return question_rows(task, rows, where)
    raise PipelineError(
        f"{where}: neither LooGLE layout (columns input/qa_pairs, or context/question/answer); "
        f"found {', '.join(sorted(columns))}"
    )


def jsonl_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise PipelineError(f"{path}, line {number}: not valid JSON ({exc.msg})") from None
    return rows
