"""`make loogle-evidence ARGS="task=... data=..."`: ``python -m pipeline.commands.loogle_evidence``
(Hydra overrides of ``conf/loogle_evidence.yaml``): each evidence string of LooGLE's questions located
in its document (``pipeline.loogle.evidence.locating``), the fraction located per task and per rule
printed as a table, the unlocated ones named, and every span written to a JSON file."""

from __future__ import annotations

from collections import Counter
from typing import Any

from pipeline.loogle.data.questions import SAMPLE_DIR, TASKS, Question, check_task
from pipeline.loogle.data.reading import DataSource, fingerprint
from pipeline.loogle.evidence import locating as evidence

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
            for r in records
            if r["rule"] == "unlocated"
        ],
    }


def report(task: str, questions: list[Question]) -> dict[str, Any]:
    """A task's summary and every evidence record, with the questions' fingerprint."""
    records = locate_questions(questions)
    return {**summarise(task, questions, records), "fingerprint": fingerprint(questions), "evidence": records}


def tasks_of(task: str, source: DataSource) -> tuple[str, ...]:
    """The tasks asked for; ``all`` on the embedded sample: the tasks it has."""
    if task != "all":
        return (check_task(task),)
    if source.data == "sample":
        return tuple(t for t in TASKS if (SAMPLE_DIR / f"{t}.jsonl").is_file())
    return TASKS


def table_lines(reports: list[dict[str, Any]]) -> list[str]:
    """A table: per task, the evidence strings, each rule's count and the fraction located; then the
    unlocated strings."""
    header = f"{'task':<22}{'evidence':>9}" + "".join(f"{r:>11}" for r in (*evidence.RULES, "unlocated"))
    lines = [header + f"{'located':>9}"]
    for rep in reports:
        counts = "".join(f"{rep['by_rule'][r]:>11}" for r in (*evidence.RULES, "unlocated"))
        share = "-" if rep["fraction_located"] is None else f"{rep['fraction_located']:.1%}"
        lines.append(f"{rep['task']:<22}{rep['n_evidence']:>9}{counts}{share:>9}")
    for rep in reports:
        for miss in rep["unlocated"]:
            head = miss["head"].replace("\n", " ")
            lines.append(f"unlocated  {rep['task']}  {miss['qid']} [{miss['evidence_index']}]  {head}")
    return lines


def settings() -> dict[str, Any]:
    """The alignment's constants, recorded with its results."""
    names = ("MIN_PIECE", "ANCHOR", "FUZZY_RATIO", "MIN_BLOCK", "MAX_GAP")
    return {name.lower(): getattr(evidence, name) for name in names}
