"""LooGLE's documents as a key-token corpus (``corpus=loogle_sample``, ``corpus=loogle``), with their
questions, answers and located evidence, which stage 1 writes beside the key tokens
(``questions.parquet``, ``evidence.parquet``; ``pipeline.artifact.schema``).

A text can be in several tasks (the sample's Wikipedia article on José Luis Picardo is in shortdep_qa
and longdep_qa): documents are the distinct texts, told apart by their sha256, in the order the tasks
(``corpus.tasks``) and their rows first give them. Each document's id is ``loogle-`` and the first 12
hex digits of its text's sha256: the same for the same text whatever the tasks, their order, the
layout or the source. Its questions are those of every task, in that order, each with its evidence
located by ``pipeline.text.locating`` (the rule used, or ``unlocated``: never guessed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from pipeline.artifact.schema import EVIDENCE_SCHEMA, QUESTIONS_SCHEMA, UNLOCATED
from pipeline.errors import PipelineError
from pipeline.loogle.data.questions import Question, check_task
from pipeline.loogle.data.reading import DataSource, fingerprint, load_questions
from pipeline.loogle.evidence.alignment_report import settings as alignment_settings
from pipeline.provenance import json_sha256, text_sha256
from pipeline.text import locating as evidence
from pipeline.text.corpus import CorpusSpec, Document, check_unicode

ID_DIGITS = 12


@dataclass
class LoogleCorpus:
    """The distinct documents, each document's questions (by document id, in order) and where they
    came from (the manifest's ``questions`` record)."""

    documents: list[Document]
    questions: dict[str, list[Question]]
    record: dict[str, Any] = field(default_factory=dict)

    def identity(self) -> dict[str, Any]:
        """What the artifact's fingerprint covers of the questions (its settings' ``questions``): a
        hash of every question, in order (task, id, type, question, answer, evidence strings), and
        the alignment settings that locate the evidence. An edit of any of them in the data is other
        settings (`make keytokens` refuses to call the artifact complete), not the same artifact."""
        rows = [
            [q.task, q.qid, q.kind, q.question, q.answer, list(q.evidence)]
            for doc in self.documents
            for q in self.questions[doc.id]
        ]
        return {"sha256": json_sha256(rows), "alignment": self.record["alignment"]}

    def tables(self, doc_ids: list[str]) -> dict[str, pa.Table]:
        """The question tables of the documents ``doc_ids`` (those an artifact keeps), in that order."""
        texts = {doc.id: doc.text for doc in self.documents}
        questions: list[dict[str, Any]] = []
        spans: list[dict[str, Any]] = []
        for doc_id in doc_ids:
            located = evidence.Document(texts[doc_id])
            for index, question in enumerate(self.questions[doc_id]):
                questions.append(question_row(doc_id, index, question))
                for number, text in enumerate(question.evidence):
                    spans += evidence_rows(doc_id, index, number, text, evidence.locate(text, located))
        return {
            "questions": pa.Table.from_pylist(questions, QUESTIONS_SCHEMA),
            "evidence": pa.Table.from_pylist(spans, EVIDENCE_SCHEMA),
        }


def question_row(doc_id: str, index: int, question: Question) -> dict[str, Any]:
    answer = question.answer
    return {
        "doc_id": doc_id,
        "question_index": index,
        "task": question.task,
        "source_id": f"{question.task}/{question.qid}",
        "type": question.kind,
        "question": question.question,
        "answer": answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False),
        "n_evidence": len(question.evidence),
    }


def evidence_rows(
    doc_id: str, index: int, number: int, text: str, found: evidence.Located
) -> list[dict[str, Any]]:
    """One row per span of a located evidence string; one row without offsets for an unlocated one."""
    base = {"doc_id": doc_id, "question_index": index, "evidence_index": number, "rule": found.rule}
    base |= {"occurrences": found.occurrences, "ratio": found.ratio, "text": text}
    if not found.located:
        return [{**base, "piece_index": 0, "char_start": None, "char_end": None, "rule": UNLOCATED}]
    return [
        {**base, "piece_index": piece, "char_start": start, "char_end": end}
        for piece, (start, end) in enumerate(found.spans)
    ]


def source_of(spec: CorpusSpec) -> DataSource:
    """The LooGLE data a corpus names: the sample, the Hub dataset at its revision, or a folder."""
    if spec.loogle == "hub" and not spec.dataset:
        raise PipelineError(f"corpus '{spec.name}': loogle=hub needs corpus.dataset (e.g. bigainlco/LooGLE)")
    dataset = spec.dataset or DataSource.dataset
    return DataSource(str(spec.loogle), dataset, spec.revision, option="corpus.loogle")


def load_loogle_corpus(spec: CorpusSpec) -> LoogleCorpus:
    """The corpus: each task's questions loaded (``pipeline.loogle.data.reading``), their texts deduplicated
    by sha256, with stable ids (module doc)."""
    if not spec.tasks:
        raise PipelineError(f"corpus '{spec.name}': corpus.tasks is empty; name at least one LooGLE task")
    source = source_of(spec)
    documents: dict[str, Document] = {}
    questions: dict[str, list[Question]] = {}
    fingerprints = {}
    for task in spec.tasks:
        task_questions = load_questions(check_task(task), source)
        fingerprints[task] = fingerprint(task_questions)
        for question in task_questions:
            doc = document_of(question, documents)
            questions.setdefault(doc.id, []).append(question)
    record = {
        "source": source.label,
        "dataset": source.dataset if source.data == "hub" else None,
        "revision": source.revision if source.data == "hub" else None,
        "tasks": fingerprints,
        "alignment": alignment_settings(),
    }
    return LoogleCorpus(list(documents.values()), questions, record)


def document_of(question: Question, documents: dict[str, Document]) -> Document:
    """The document of a question's text (made on its first question); two texts with one id are an
    error, never merged."""
    sha = text_sha256(question.context)
    doc_id = f"loogle-{sha[:ID_DIGITS]}"
    doc = documents.get(doc_id)
    if doc is None:
        check_unicode(question.context, f"LooGLE document of {question.task}/{question.qid}")
        doc = documents[doc_id] = Document(id=doc_id, text=question.context)
    elif doc.sha256 != sha:
        raise PipelineError(
            f"LooGLE texts {doc_id} and that of {question.task}/{question.qid} differ but share the first "
            f"{ID_DIGITS} hex digits of their sha256: report this; the ids must be told apart"
        )
    return doc
