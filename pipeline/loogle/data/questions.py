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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pipeline.errors import PipelineError
from pipeline.files import DATA_DIR
from pipeline.loogle.data.bounds import MAX_ROWS, check_row, check_strings, kind

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
        check_strings(pair, f"qa_pairs of {where}, item {number}", "item")
    return pairs


def answer_of(task: str, value: Any, where: str) -> str | dict[str, str]:
    """A checked answer: a cloze answer is a mapping of masks to strings (held as a literal string in
    the question layout), any other task's a string."""
    if task == "shortdep_cloze":
        value = literal(value, f"the cloze answer of {where}") if isinstance(value, str) else value
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise PipelineError(f"the cloze answer of {where}: expected a mapping of masks to entities")
        check_strings(value, where, "answer")
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


def kind_of(value: Any, where: str) -> str | None:
    """A question's type (LooGLE's ``type``), or None when the data gives none; a type that is not text
    (a mapping, a list) is one line naming ``where``, never taken as its repr."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise PipelineError(f"{where}, field type: expected a string, got {kind(value)}")
    return value


def text_of(row: dict[str, Any], field: str, where: str) -> str:
    """A row's string field (a document's text, a question), or one line naming the row and the field."""
    if field not in row:
        raise PipelineError(f"{where}: no field {field}")
    if not isinstance(row[field], str):
        raise PipelineError(f"{where}, field {field}: expected a string, got {kind(row[field])}")
    return row[field]


def document_id(row: dict[str, Any], columns: tuple[str, ...], where: str) -> str | None:
    """A row's document id: its first id column that is set (text or a whole number), else None."""
    column = next((c for c in columns if row.get(c) not in (None, "")), None)
    if column is None:
        return None
    value = row[column]
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise PipelineError(
            f"{where}, field {column}: a document id is text or a whole number, not {kind(value)}"
        )
    return str(value)


def document_questions(task: str, row: dict[str, Any], number: int, where: str) -> list[Question]:
    """The questions of one document row (``input``, ``title``, ``qa_pairs``, ``output``); a document
    without a title is ``doc-<row>`` (its place in the file: the same wherever the data lies)."""
    here = f"{where} row {number}"
    context, qa_pairs = text_of(row, "input", here), text_of(row, "qa_pairs", here)
    doc_id = document_id(row, ("title",), here) or f"doc-{number}"
    if qa_pairs == "none":
        return [Question(task, doc_id, 0, context, "", answer_of(task, row.get("output"), here))]
    pairs = parse_qa_pairs(qa_pairs, f"{here} ({doc_id})")
    return [
        Question(
            task,
            doc_id,
            i,
            context,
            text_of(p, "Q", f"{here} item {i}"),
            answer_of(task, p["A"], f"{here} item {i}"),
            evidence_of(p.get("S"), f"{here} item {i}"),
            kind_of(p.get("type"), f"{here} item {i}"),
        )
        for i, p in enumerate(pairs)
    ]


def question_rows(task: str, rows: Iterable[dict[str, Any]], where: str) -> list[Question]:
    """Questions of the one-row-per-question layout, numbered within their document in order; rows of
    one id hold one text (two documents of one title are refused)."""
    out: list[Question] = []
    seen: dict[str, tuple[int, str, int]] = {}  # id -> (questions so far, its text, its first row)
    texts: dict[str, str] = {}  # a document without an id column: numbered by its distinct texts
    for number, row in enumerate(rows):
        here = f"{where} row {number}"
        context = text_of(row, "context", here)
        doc_id = document_id(row, ID_COLUMNS, here) or texts.setdefault(context, f"doc-{len(texts)}")
        index, text, first = seen.get(doc_id, (0, context, number))
        if text != context:
            raise PipelineError(same_id(where, doc_id, first, number))
        seen[doc_id] = (index + 1, text, first)
        question = text_of(row, "question", here) if row.get("question") is not None else ""
        answer = answer_of(task, row.get("answer"), here)
        evidence = evidence_of(row.get("evidence"), here)
        out.append(
            Question(task, doc_id, index, context, question, answer, evidence, kind_of(row.get("type"), here))
        )
    return out


def same_id(where: str, doc_id: str, first: int, number: int) -> str:
    """The refusal of two documents of one id, with the fix."""
    return (
        f"{where} rows {first} and {number}: two documents with the id {doc_id!r}, whose questions would "
        "share their ids: give each document its own title (or id) in the data"
    )


LAYOUTS = {"document": ("input", "qa_pairs"), "question": ("context", "answer")}


def questions_from_rows(task: str, rows: list[Any], where: str) -> list[Question]:
    """Either layout, told apart by the first row's columns; every row checked (an object of that
    layout, its strings text within their bounds), document ids unique."""
    if len(rows) > MAX_ROWS:
        raise PipelineError(f"{where}: {len(rows)} rows, over the limit of {MAX_ROWS} for one task")
    rows = [check_row(row, f"{where} row {n}") for n, row in enumerate(rows)]
    if layout_of(rows, where) == "question":
        return question_rows(task, rows, where)
    documents = [document_questions(task, row, n, where) for n, row in enumerate(rows)]
    firsts: dict[str, int] = {}
    for number, questions in enumerate(documents):
        first = firsts.setdefault(questions[0].doc_id, number)
        if first != number:
            raise PipelineError(same_id(where, questions[0].doc_id, first, number))
    return [q for questions in documents for q in questions]


def layout_of(rows: list[dict[str, Any]], where: str) -> str:
    """The layout of the first row (``LAYOUTS``), which every row must have."""
    if not rows:
        raise PipelineError(f"{where}: no rows")
    layout = next((name for name, need in LAYOUTS.items() if set(need) <= set(rows[0])), None)
    if layout is None:
        raise PipelineError(
            f"{where}: neither LooGLE layout (columns input/qa_pairs, or context/question/answer); "
            f"found {', '.join(sorted(rows[0]))[:200]}"
        )
    for number, row in enumerate(rows):
        if missing := [c for c in LAYOUTS[layout] if c not in row]:
            mixed = any(set(need) <= set(row) for need in LAYOUTS.values())
            raise PipelineError(
                f"{where} row {number}: no field {missing[0]} (row 0 has one {layout} per row)"
                + ("; the file mixes LooGLE's two layouts: keep one" if mixed else "")
            )
    return layout
