"""LooGLE's evidence located per task (`make loogle-evidence ARGS="task=... data=..."`,
``conf/loogle_evidence.yaml``): each evidence string of its questions located in its document
(``pipeline.text.locating``), the fraction located per task and per rule, the unlocated
ones named, and every span written to a JSON file (``pipeline.reporting.loogle_evidence`` prints it)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pydantic.dataclasses

from pipeline.files import write_json_atomic
from pipeline.formats import file_slug
from pipeline.loogle.data.questions import Question, check_task
from pipeline.loogle.data.reading import DataSource, fingerprint, load_questions, tasks_held
from pipeline.marks import json_report, made_by
from pipeline.outputs import Output, check
from pipeline.text import locating as evidence

HEAD = 80  # characters of an unlocated evidence string shown in the report


def locate_questions(questions: list[Question]) -> list[dict[str, Any]]:
    """One record per evidence string of the questions: where it is (``evidence.locate``) and how it
    was found; each document normalised once."""
    documents: dict[str, evidence.Document] = {}
    records = []
    for question in questions:
        if question.context not in documents:
            documents[question.context] = evidence.Document(question.context)
        document = documents[question.context]
        for number, text in enumerate(question.evidence):
            found = evidence.locate(text, document)
            records.append(
                {
                    "qid": question.qid,
                    "evidence_index": number,
                    "rule": found.rule,
                    "spans": [list(span) for span in found.spans],
                    "occurrences": found.occurrences,
                    "ratio": found.ratio,
                    "chars": len(text),
                    "head": text[:HEAD],
                    **({"note": found.note} if found.note else {}),
                }
            )
    return records


def summarise(task: str, questions: list[Question], records: list[dict[str, Any]]) -> dict[str, Any]:
    """A task's counts: evidence strings, how many each rule located, the fraction located (null
    without evidence) and the unlocated ones (question id, evidence index, first characters)."""
    counts = Counter(r["rule"] for r in records)
    located = sum(counts[rule] for rule in evidence.RULES)
    total = len(records)
    return {
        "task": task,
        "n_questions": len(questions),
        "n_questions_with_evidence": sum(1 for q in questions if q.evidence),
        "n_evidence": total,
        "by_rule": {rule: counts[rule] for rule in (*evidence.RULES, "unlocated")},
        "located": located,
        "fraction_located": located / total if total else None,
        "fraction_by_rule": {rule: counts[rule] / total if total else None for rule in evidence.RULES},
        "unlocated": [
            {"qid": r["qid"], "evidence_index": r["evidence_index"], "head": r["head"]}
            | ({"note": r["note"]} if "note" in r else {})
            for r in records
            if r["rule"] == "unlocated"
        ],
    }


def report(task: str, questions: list[Question]) -> dict[str, Any]:
    """A task's summary and every evidence record, with the questions' fingerprint."""
    records = locate_questions(questions)
    return {**summarise(task, questions, records), "fingerprint": fingerprint(questions), "evidence": records}


def tasks_of(task: str, source: DataSource) -> tuple[str, ...]:
    """The tasks asked for; ``all``: each task the data has (a folder or the sample: those it holds)."""
    return (check_task(task),) if task != "all" else tasks_held(source)


def settings() -> dict[str, Any]:
    """The alignment's constants, recorded with its results (``pipeline.text.locating.settings``)."""
    return evidence.settings()


@pydantic.dataclasses.dataclass(frozen=True)
class EvidenceOptions:
    """`make loogle-evidence`'s settings: the data, the tasks, where the JSON goes."""

    task: str
    data: str
    dataset: str
    revision: str | None = None
    results_dir: str = "artifacts/results"
    out: str | None = None  # None: <results_dir>/loogle-evidence--<data>.json

    @property
    def source(self) -> DataSource:
        return DataSource(self.data, self.dataset, self.revision)


def locate_evidence(options: EvidenceOptions) -> tuple[dict[str, Any], Path]:
    """Every task's evidence located and written as JSON (its path checked before any work:
    ``pipeline.outputs``, a JSON report marked ``made_by``); the result and where it went. Its command
    stays offline unless the data is the Hub's."""
    source = options.source
    default = Path(options.results_dir) / f"loogle-evidence--{file_slug(source.label, 'data')}.json"
    out = check(Output("out", Path(options.out) if options.out else default, json_report("loogle-evidence")))
    questions = {task: load_questions(task, source) for task in tasks_of(options.task, source)}
    result = {
        "made_by": made_by("loogle-evidence"),
        "data": source.label,
        "alignment": settings(),
        "tasks": [report(t, q) for t, q in questions.items()],
    }
    write_json_atomic(out.path, result, out)
    return result, out.path
