"""An artifact's questions (``questions.parquet``, ``evidence.parquet``; ``pipeline.artifact.schema``):
their checks on load, and each question with its located evidence as records (``artifact_questions``).

Checked on every load of an artifact that declares them (``load_artifact``), beside the file hashes:

- the manifest's ``questions`` record is a mapping, and each table has the rows its ``files`` record;
- questions: every ``doc_id`` a document of the artifact, rows grouped in document order,
  ``question_index`` 0, 1, ... within each document, ``source_id`` unique, ``n_evidence`` >= 0;
- the record of what the cut keeps of each document (``kept_records``), where there is one, equal to
  the documents table and to the counts recomputed from the tables;
- evidence: every row names a question, in the questions' order; each question's ``evidence_index``
  0 .. ``n_evidence`` - 1, each with ``piece_index`` 0, 1, ..., its rule one of ``EVIDENCE_RULES`` or
  ``unlocated``; an ``unlocated`` string has null offsets
  and one row, a located one ``0 <= char_start < char_end <= n_source_chars``; an ``exact`` span inside
  the kept text is that text's characters (the evidence string stripped);
- every evidence string located again (``pipeline.text.locating``, whatever its stored rule): in a
  whole text, its rule, spans, occurrences and ratio must be what the text gives; in a truncated one,
  where the kept text alone decides (the string found there exactly, or by the normalised rule), its
  rule and span. A relabelled or moved span is refused, as is an artifact located with other alignment
  settings than these whose spans now differ (to be regenerated).

A failure is one PipelineError naming the table, the row and what is wrong.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from pipeline.artifact.checks import FIX, ArtifactProblem
from pipeline.artifact.schema import EVIDENCE_RULES, QUESTIONS, UNLOCATED, KeyTokenArtifact
from pipeline.artifact.shards import recorded_rows
from pipeline.text import locating

Span = tuple[int, int]


@dataclass(frozen=True)
class Evidence:
    """One evidence string of a question: how it was located (a rule, or ``unlocated``), its spans in
    the source text's characters (several for elided evidence), how often its matched form occurs,
    and the fuzzy rule's ratio."""

    text: str
    rule: str
    spans: tuple[Span, ...]
    occurrences: int
    ratio: float | None

    @property
    def located(self) -> bool:
        return self.rule != UNLOCATED

    def inside(self, n_chars: int) -> bool:
        """Whether it is located and every span lies in the first ``n_chars`` characters (the kept
        text of a truncated document)."""
        return self.located and all(end <= n_chars for _, end in self.spans)


@dataclass(frozen=True)
class ArtifactQuestion:
    """One question of an artifact's document, with its answer and its evidence."""

    doc_id: str
    question_index: int
    task: str
    source_id: str
    type: str | None
    question: str
    answer: str
    evidence: tuple[Evidence, ...]


def artifact_questions(artifact: KeyTokenArtifact) -> list[ArtifactQuestion]:
    """Every question of the artifact in order (one PipelineError when it has none)."""
    grouped: dict[tuple[str, int], dict[int, list[dict[str, Any]]]] = {}
    for row in artifact.evidence.to_pylist():
        key = (row["doc_id"], row["question_index"])
        grouped.setdefault(key, {}).setdefault(row["evidence_index"], []).append(row)
    out = []
    for row in artifact.questions.to_pylist():
        strings = grouped.get((row["doc_id"], row["question_index"]), {})
        evidence = tuple(evidence_of(strings[i]) for i in sorted(strings))
        fields = {k: row[k] for k in ("doc_id", "question_index", "task", "source_id", "type", "question")}
        out.append(ArtifactQuestion(**fields, answer=row["answer"], evidence=evidence))
    return out


def evidence_of(rows: list[dict[str, Any]]) -> Evidence:
    first = rows[0]
    spans = tuple((r["char_start"], r["char_end"]) for r in rows if r["char_start"] is not None)
    return Evidence(first["text"], first["rule"], spans, first["occurrences"], first["ratio"])


def check_questions(artifact: KeyTokenArtifact) -> None:
    """The checks of the module doc; raises ArtifactProblem at the first failure."""
    where = f"artifact {artifact.root}"
    if not isinstance(artifact.manifest.get(QUESTIONS), dict):
        raise ArtifactProblem(f"{where}: the manifest's {QUESTIONS} record is not a mapping; {FIX}")
    for name, table in (artifact.qa or {}).items():
        recorded = recorded_rows(artifact.manifest, name)
        if recorded != table.num_rows:
            raise ArtifactProblem(
                f"{where}: {name}.parquet has {table.num_rows} rows, its manifest records {recorded}; {FIX}"
            )
    docs = artifact.documents.to_pydict()
    position = {doc: i for i, doc in enumerate(docs["doc_id"])}
    counts = check_question_rows(artifact.questions.to_pylist(), position, where)
    evidence = artifact.evidence.to_pylist()
    check_evidence_rows(evidence, counts, docs, where)
    check_kept(artifact, docs, where)
    check_located(evidence, docs, artifact.manifest[QUESTIONS].get("alignment"), where)


def kept_records(qa: dict[str, pa.Table], documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the cut to ``max_tokens`` keeps of each document (``documents``: doc_id, n_tokens,
    n_source_tokens, n_chars, n_source_chars) and of its evidence: the questions, the evidence strings,
    those located, and those located entirely inside the kept characters (every span)."""
    strings: dict[str, dict[tuple[int, int], list[dict[str, Any]]]] = {}
    for row in qa["evidence"].to_pylist():
        key = (row["question_index"], row["evidence_index"])
        strings.setdefault(row["doc_id"], {}).setdefault(key, []).append(row)
    questions = Counter(qa["questions"]["doc_id"].to_pylist())
    out = []
    for doc in documents:
        mine = list(strings.get(doc["doc_id"], {}).values())
        located = [rows for rows in mine if rows[0]["rule"] != UNLOCATED]
        inside = [rows for rows in located if all(r["char_end"] <= doc["n_chars"] for r in rows)]
        counts = {"n_questions": questions[doc["doc_id"]], "n_evidence": len(mine)}
        out.append({**doc, **counts, "located": len(located), "inside_kept": len(inside)})
    return out


def check_kept(artifact: KeyTokenArtifact, docs: dict[str, list], where: str) -> None:
    """The manifest's record of what the cut keeps, against the tables (when it has one)."""
    recorded = artifact.manifest[QUESTIONS].get("documents")
    if recorded is None:
        return
    keys = ("doc_id", "n_tokens", "n_chars", "n_source_chars")
    rows = [dict(zip(keys, values, strict=True)) for values in zip(*(docs[k] for k in keys), strict=True)]
    if not isinstance(recorded, list) or len(recorded) != len(rows):
        raise ArtifactProblem(
            f"{where}: the manifest's {QUESTIONS} record does not list every document; {FIX}"
        )
    sources = [r.get("n_source_tokens") if isinstance(r, dict) else None for r in recorded]
    if any(not isinstance(n, int) or n < row["n_tokens"] for n, row in zip(sources, rows, strict=True)):
        raise ArtifactProblem(f"{where}: a document's n_source_tokens is fewer than it kept; {FIX}")
    rows = [{**row, "n_source_tokens": n} for row, n in zip(rows, sources, strict=True)]
    for found, expected in zip(recorded, kept_records(artifact.qa or {}, rows), strict=True):
        if found != expected:
            found = found if isinstance(found, dict) else {}
            key = next(k for k in expected if found.get(k) != expected[k])
            raise ArtifactProblem(
                f"{where}: the manifest's {QUESTIONS} record of document '{expected['doc_id']}' says {key} "
                f"is {found.get(key)!r}, the tables {expected[key]!r}; {FIX}"
            )


def check_question_rows(rows: list[dict[str, Any]], position: dict[str, int], where: str) -> dict:
    """The questions table's rows; returns each question's ``n_evidence`` by (doc_id, question_index),
    in order."""
    counts: dict[tuple[str, int], int] = {}
    sources: set[str] = set()
    last = (-1, -1)
    for number, row in enumerate(rows):
        at = f"{where}: questions.parquet row {number}"
        doc = row["doc_id"]
        if doc not in position:
            raise ArtifactProblem(f"{at}: document '{doc}' is not in the artifact; {FIX}")
        expected = last[1] + 1 if position[doc] == last[0] else 0
        if position[doc] < last[0] or row["question_index"] != expected:
            raise ArtifactProblem(
                f"{at} (document '{doc}'): question_index {row['question_index']}, expected {expected} "
                f"(rows grouped by document in document order); {FIX}"
            )
        if row["source_id"] in sources:
            raise ArtifactProblem(f"{at}: source_id '{row['source_id']}' is there twice; {FIX}")
        if row["n_evidence"] is None or row["n_evidence"] < 0:
            raise ArtifactProblem(f"{at}: n_evidence is {row['n_evidence']}; {FIX}")
        sources.add(row["source_id"])
        last = (position[doc], row["question_index"])
        counts[(doc, row["question_index"])] = row["n_evidence"]
    return counts


def check_evidence_rows(
    rows: list[dict[str, Any]], counts: dict[tuple[str, int], int], docs: dict[str, list], where: str
) -> None:
    """The evidence table's rows against the questions (``counts``) and the documents."""
    order = {key: i for i, key in enumerate(counts)}
    index = {doc: i for i, doc in enumerate(docs["doc_id"])}
    expected = (-1, -1, 0)  # the previous row's question, evidence string and next piece
    seen = {key: 0 for key in counts}
    for number, row in enumerate(rows):
        at = f"{where}: evidence.parquet row {number}"
        key = (row["doc_id"], row["question_index"])
        if key not in order:
            raise ArtifactProblem(f"{at}: no question {key[1]} of document '{key[0]}'; {FIX}")
        place = (order[key], row["evidence_index"])
        if place == expected[:2]:
            want = (place, expected[2])
        else:
            want = ((order[key], seen[key]), 0)
            if place < expected[:2] or row["evidence_index"] != seen[key]:
                raise ArtifactProblem(
                    f"{at}: evidence_index {row['evidence_index']} of question {key}, expected "
                    f"{seen[key]} (rows in the questions' order); {FIX}"
                )
            seen[key] += 1
        if row["piece_index"] != want[1]:
            raise ArtifactProblem(f"{at}: piece_index {row['piece_index']}, expected {want[1]}; {FIX}")
        check_span(row, docs, index[key[0]], at)
        expected = (*place, want[1] + 1)
    short = next((key for key, n in counts.items() if seen[key] != n), None)
    if short is not None:
        raise ArtifactProblem(
            f"{where}: question {short[1]} of document '{short[0]}' has n_evidence {counts[short]}, "
            f"evidence.parquet holds {seen[short]}; {FIX}"
        )


def check_span(row: dict[str, Any], docs: dict[str, list], doc: int, at: str) -> None:
    """One evidence row's offsets against its rule and its document."""
    start, end = row["char_start"], row["char_end"]
    if row["rule"] not in (*EVIDENCE_RULES, UNLOCATED):
        raise ArtifactProblem(
            f"{at}: rule {row['rule']!r} is none of {', '.join(EVIDENCE_RULES)}, {UNLOCATED}; {FIX}"
        )
    if row["rule"] == UNLOCATED:
        if start is not None or end is not None or row["piece_index"] != 0:
            raise ArtifactProblem(f"{at}: an unlocated evidence string with offsets; {FIX}")
        return
    if start is None or end is None or not 0 <= start < end <= docs["n_source_chars"][doc]:
        raise ArtifactProblem(
            f"{at}: span [{start}, {end}) is not inside its source text of "
            f"{docs['n_source_chars'][doc]} characters; {FIX}"
        )
    text = docs["text"][doc]
    if row["rule"] == "exact" and end <= len(text) and text[start:end] != row["text"].strip():
        raise ArtifactProblem(f"{at}: an exact span that is not its evidence string in the text; {FIX}")


def check_located(rows: list[dict[str, Any]], docs: dict[str, list], alignment: Any, where: str) -> None:
    """Every evidence string's stored location against the one its text gives now (module doc)."""
    strings: dict[tuple[str, int, int], list[tuple[int, dict[str, Any]]]] = {}
    for number, row in enumerate(rows):
        key = (row["doc_id"], row["question_index"], row["evidence_index"])
        strings.setdefault(key, []).append((number, row))
    index = {doc: i for i, doc in enumerate(docs["doc_id"])}
    texts: dict[str, locating.Document] = {}
    for (doc, question, number), found in strings.items():
        text, first = docs["text"][index[doc]], found[0][1]
        document = texts.get(doc) or texts.setdefault(doc, locating.Document(text))
        spans = tuple((r["char_start"], r["char_end"]) for _, r in found if r["char_start"] is not None)
        stored = (first["rule"], spans, first["occurrences"], first["ratio"])
        whole = len(text) == docs["n_source_chars"][index[doc]]
        expected = relocated(first["text"], document, whole, stored)
        if expected is None or expected == stored[: len(expected)]:
            continue
        other = "" if alignment == locating.settings() else " (it was located with other alignment settings)"
        raise ArtifactProblem(
            f"{where}: evidence.parquet row {found[0][0]} (question {question} of document '{doc}', "
            f"evidence {number}) is stored as {describe(stored[: len(expected)])}; its text locates it as "
            f"{describe(expected)}{other}; {FIX}"
        )


def relocated(evidence: str, document: locating.Document, whole: bool, stored: tuple) -> tuple | None:
    """Where the text puts an evidence string: in a whole text (rule, spans, occurrences, ratio); in
    a truncated one (rule, spans) only where the kept text decides it, None otherwise: found exactly, or
    by the normalised rule when the stored string is not exact past the cut."""
    if whole:
        found = locating.locate(evidence, document)
        return (found.rule, found.spans, found.occurrences, found.ratio)
    found = document.find(evidence)
    if found is None:
        return None
    rule, span, _ = found
    beyond = stored[0] == "exact" and stored[1] and stored[1][0][1] > len(document.text)
    return None if rule == "normalised" and beyond else (rule, (span,))


def describe(location: tuple) -> str:
    """A location as the error shows it: the rule and spans (and, of a whole text's, the occurrences
    and the fuzzy ratio)."""
    rule, spans, *rest = location
    counts = f" ({rest[0]} occurrences, ratio {rest[1]})" if rest else ""
    return rule + "".join(f" [{start}, {end})" for start, end in spans) + counts
