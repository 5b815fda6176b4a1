"""The answer gain of a LooGLE question: how much its document helps a model predict the gold answer.

Per question and context limit W (tokens): the log-likelihood of the gold answer given LooGLE's prompt
with the document and the question (``build_prompt``, cut to W less the answer's tokens by keeping the
first and last halves of its tokens, as ``make loogle`` cuts), minus that given the prompt with the
question alone (the same template, an empty document). In nats (a sum over the answer's tokens), and
in bits per byte of the answer's UTF-8. The answer's tokens are the tokenizer's of the answer alone,
after the prompt's (the tokens ``make loogle`` would generate), the same in both conditions.

The document is the artifact's text (the characters stage 1 kept), so the answer gain and LongPPL see
the same text. A question counts only when some of its evidence was located and every located span lies
inside what the model keeps: in the artifact's text and in the kept halves of the cut prompt (a counted
question's evidence strings that could not be located are counted: ``unlocated``). Any other question is
an exclusion with its reason (``NO_EVIDENCE``, ``OUTSIDE``; ``NO_ROOM`` where the limit cannot hold even the
instruction, the question and the answer), counted, never scored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from pipeline.artifact.qa import ArtifactQuestion, artifact_questions
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.loogle.data.prompts import build_prompt
from pipeline.loogle.generation.decoding import Cut, PromptTooLong, cut_to, tokenize_prompt
from pipeline.models.logprobs import TargetScorer

NO_EVIDENCE = "no evidence located"
OUTSIDE = "evidence outside the kept context"
NO_ROOM = "the limit cannot hold the instruction, question and answer"


@dataclass(frozen=True)
class AnswerGain:
    """One question at one context limit: counted (``excluded`` None) with its log-likelihoods, or
    excluded with the reason."""

    source_id: str
    doc_id: str
    type: str | None
    limit: int
    excluded: str | None
    answer_tokens: int
    answer_bytes: int
    unlocated: int  # evidence strings of the question that could not be located
    prompt_tokens: int = 0  # the cut prompt's tokens (with the document)
    with_document: float = math.nan  # log P(answer | document, question), nats
    question_only: float = math.nan  # log P(answer | question), nats

    @property
    def nats(self) -> float:
        return self.with_document - self.question_only

    @property
    def bits_per_byte(self) -> float:
        return self.nats / math.log(2) / self.answer_bytes

    def to_dict(self) -> dict[str, Any]:
        counted = self.excluded is None
        return {
            "source_id": self.source_id,
            "doc_id": self.doc_id,
            "type": self.type,
            "limit": self.limit,
            "excluded": self.excluded,
            "answer_tokens": self.answer_tokens,
            "answer_bytes": self.answer_bytes,
            "unlocated_evidence": self.unlocated,
            "prompt_tokens": self.prompt_tokens,
            "with_document": self.with_document if counted else None,
            "question_only": self.question_only if counted else None,
            "gain_nats": self.nats if counted else None,
            "gain_bits_per_byte": self.bits_per_byte if counted else None,
        }


def answer_logprob(scorer: TargetScorer, prompt_ids: list[int], answer_ids: list[int]) -> float:
    """log P(answer | prompt): the sum over the answer's tokens, one forward pass (float64 sum)."""
    seq = torch.tensor(prompt_ids + answer_ids, dtype=torch.long)
    positions = torch.arange(len(prompt_ids) - 1, len(seq) - 1)
    return float(scorer.score(seq, positions).sum())


def answer_ids(tokenizer: Any, question: ArtifactQuestion) -> list[int]:
    """The answer's tokens (without special tokens); an empty answer is an error."""
    ids = list(tokenizer(question.answer, add_special_tokens=False)["input_ids"])
    if not ids:
        raise PipelineError(f"LooGLE question {question.source_id}: its answer is empty; nothing to score")
    return ids


def evidence_inside(question: ArtifactQuestion, text: str, start: int, cut: Cut) -> bool:
    """Every located span of the question's evidence lies in ``text`` (the artifact's) and, shifted by
    the document's ``start`` in the prompt, inside one kept character range of the cut prompt."""
    if cut.kept_chars is None:
        raise PipelineError(
            "the answer gain needs a fast tokenizer (character offsets) to place the evidence"
        )
    spans = [span for e in question.evidence if e.located for span in e.spans]
    return all(
        b <= len(text) and any(lo <= a + start and b + start <= hi for lo, hi in cut.kept_chars)
        for a, b in spans
    )


def question_gain(
    tokenizer: Any,
    scorer: TargetScorer,
    question: ArtifactQuestion,
    text: str,
    limit: int,
    question_only: dict[str, float],
) -> AnswerGain:
    """The answer gain of one question at context limit ``limit``; ``question_only`` caches each
    question's log P(answer | question), which does not depend on the limit."""
    ids = answer_ids(tokenizer, question)
    unlocated = sum(not e.located for e in question.evidence)
    base = AnswerGain(question.source_id, question.doc_id, question.type, limit, None, len(ids),
                      len(question.answer.encode("utf-8")), unlocated)  # fmt: skip
    if not any(e.located for e in question.evidence):
        return _excluded(base, NO_EVIDENCE)
    prompt = build_prompt(question.task, question.question, text)
    try:
        cut = cut_to(tokenizer, prompt, limit - len(ids), f"LooGLE question {question.source_id}")
    except PromptTooLong:
        return _excluded(base, NO_ROOM)
    if not evidence_inside(question, text, prompt.start, cut):
        return _excluded(base, OUTSIDE, len(cut.ids))
    if question.source_id not in question_only:
        alone, _ = tokenize_prompt(tokenizer, build_prompt(question.task, question.question, ""))
        question_only[question.source_id] = answer_logprob(scorer, alone, ids)
    with_document = answer_logprob(scorer, cut.ids, ids)
    return replace(base, prompt_tokens=len(cut.ids), with_document=with_document,
                   question_only=question_only[question.source_id])  # fmt: skip


def _excluded(base: AnswerGain, reason: str, prompt_tokens: int = 0) -> AnswerGain:
    return replace(base, excluded=reason, prompt_tokens=prompt_tokens)


def questions_of(
    artifact: KeyTokenArtifact, tasks: Iterable[str]
) -> tuple[list[ArtifactQuestion], dict[str, str]]:
    """An artifact's questions of ``tasks`` and the text of each of its documents, by id; an artifact
    without questions, or without one of those tasks, is one PipelineError."""
    if artifact.qa is None:
        raise PipelineError(
            f"artifact {artifact.root} has no questions: give an artifact of corpus=loogle_sample or "
            'corpus=loogle (make keytokens ARGS="corpus=loogle_sample")'
        )
    tasks = list(tasks)
    questions = [q for q in artifact_questions(artifact) if q.task in tasks]
    if not questions:
        raise PipelineError(f"artifact {artifact.root} has no question of the tasks {', '.join(tasks)}")
    return questions, artifact.texts()


def answer_gains(
    tokenizer: Any,
    scorer: TargetScorer,
    questions: Iterable[ArtifactQuestion],
    texts: dict[str, str],
    limits: list[int],
) -> list[AnswerGain]:
    """Every question at every limit (``texts``: the artifact's text of each document, by id)."""
    cache: dict[str, float] = {}
    return [
        question_gain(tokenizer, scorer, q, texts[q.doc_id], limit, cache)
        for limit in limits
        for q in questions
    ]


def summary(gains: list[AnswerGain]) -> list[dict[str, Any]]:
    """Per limit (and per question type, then ``all``): the questions counted and excluded by reason,
    and the mean answer gain in nats and bits per byte over those counted (None when none is)."""
    rows = []
    for limit in dict.fromkeys(g.limit for g in gains):
        mine = [g for g in gains if g.limit == limit]
        types = sorted({g.type or "untyped" for g in mine})
        for name in [*types, "all"]:
            group = [g for g in mine if name == "all" or (g.type or "untyped") == name]
            rows.append({"limit": limit, "type": name, **aggregate(group)})
    return rows


def aggregate(gains: list[AnswerGain]) -> dict[str, Any]:
    """Counts and means of a group of answer gains."""
    counted = [g for g in gains if g.excluded is None]
    nats = np.array([g.nats for g in counted])
    bpb = np.array([g.bits_per_byte for g in counted])
    return {
        "n_questions": len(gains),
        "n_counted": len(counted),
        "n_no_evidence": sum(g.excluded == NO_EVIDENCE for g in gains),
        "n_outside": sum(g.excluded == OUTSIDE for g in gains),
        "n_no_room": sum(g.excluded == NO_ROOM for g in gains),
        "gain_nats": float(nats.mean()) if counted else None,
        "gain_bits_per_byte": float(bpb.mean()) if counted else None,
        "gain_bits_per_byte_se": float(bpb.std(ddof=1) / math.sqrt(len(bpb))) if len(bpb) > 1 else None,
        "positive": int((nats > 0).sum()),
        "counted_unlocated_evidence": sum(g.unlocated for g in counted),
    }
