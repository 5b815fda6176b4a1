"""The answer gain of a LooGLE question: how much its document helps a model predict the gold answer.

Per question and context limit W (tokens): the log-likelihood of the gold answer given LooGLE's prompt
with the document and the question (``build_prompt``, cut to W less the answer's tokens by keeping the
first and last halves of its tokens, as ``make loogle`` cuts), minus that given the prompt with the
question alone (the same template, an empty document). In nats (a sum over the answer's tokens), and
in bits per byte of the scored text's UTF-8.

The answer as it follows the prompt (``joined``): the prompt without its trailing space ("...Answer:"),
then the tokens of ``" " + answer``, only those counted. LooGLE's prompt ends in "Answer: ", and a
tokenizer splits the text "Answer: 3" as "Answer", ":", " 3": the space belongs to the answer's first
word. Scoring the answer's own tokens after a prompt token of a lone space would ask the model for a
word without its space after a space token, a sequence its tokenizer never makes of running text. The
scored text is ``" " + answer`` (its bytes are the bits-per-byte denominator), the same in both terms.

The document is the artifact's text (the characters stage 1 kept), so the answer gain and LongPPL see
the same text. A question counts only when its evidence is located (``count="all"``: every evidence
string; ``"some"``: at least one, its unlocated ones counted as ``unlocated``) and every located span lies
inside what the model keeps: in the artifact's text and in the kept halves of the cut prompt. Any other
question is an exclusion with its reason (``NO_EVIDENCE``, ``NOT_ALL_LOCATED``, ``OUTSIDE``; ``NO_ROOM``
where the limit cannot hold even the instruction, the question and the answer), counted, never scored.

A document's questions at one limit share their prompt's first tokens (the instruction and the text, or
its kept first half): those are computed once (``shared_logprobs``), each question's own tokens after
them, as the one forward pass they equal up to float rounding.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from pipeline.artifact.qa import ArtifactQuestion, artifact_questions
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.loogle.data.prompts import Prompt, build_prompt
from pipeline.loogle.generation.batched import common_prefix
from pipeline.loogle.generation.decoding import Cut, PromptTooLong, cut_to, tokenize_prompt
from pipeline.models.logprobs import TargetScorer
from pipeline.models.pairing import check_token_ids

NO_EVIDENCE = "no evidence located"
NOT_ALL_LOCATED = "some evidence not located"
OUTSIDE = "evidence outside the kept context"
NO_ROOM = "the limit cannot hold the instruction, question and answer"
COUNTS = ("all", "some")  # which questions count: all their evidence located, or some of it
# How the answer joins the prompt: as it follows it (the prompt without its trailing space, " " +
# answer), or apart (the prompt as LooGLE writes it, the answer's own tokens: the join before this one,
# kept to measure what the change moves).
JOINS = ("follows", "apart")


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


def joined(prompt: Prompt, join: str = "follows") -> Prompt:
    """The prompt without its trailing space: the answer follows as ``" " + answer`` (module doc);
    ``apart``: the prompt as it is."""
    return replace(prompt, text=prompt.text.removesuffix(" ")) if join == "follows" else prompt


def answer_text(question: ArtifactQuestion, join: str = "follows") -> str:
    """The scored text: the answer with the space that joins it to the prompt (``apart``: alone)."""
    return " " + question.answer if join == "follows" else question.answer


def answer_ids(tokenizer: Any, question: ArtifactQuestion, join: str = "follows") -> list[int]:
    """The answer's tokens as they follow the prompt (``" " + answer``, without special tokens); an
    empty answer is an error."""
    if not question.answer.strip():
        raise PipelineError(f"LooGLE question {question.source_id}: its answer is empty; nothing to score")
    return list(tokenizer(answer_text(question, join), add_special_tokens=False)["input_ids"])


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


@dataclass(frozen=True)
class Planned:
    """A counted question at one limit, before its log-likelihoods: its cut prompt and answer tokens."""

    gain: AnswerGain
    question: ArtifactQuestion
    prompt: list[int]
    answer: list[int]
    join: str = "follows"


def plan(
    tokenizer: Any,
    question: ArtifactQuestion,
    text: str,
    limit: int,
    count: str = "all",
    join: str = "follows",
) -> AnswerGain | Planned:
    """One question at context limit ``limit``: excluded (an ``AnswerGain`` with its reason), or its
    cut prompt and answer tokens (``Planned``)."""
    ids = answer_ids(tokenizer, question, join)
    unlocated = sum(not e.located for e in question.evidence)
    base = AnswerGain(question.source_id, question.doc_id, question.type, limit, None, len(ids),
                      len(answer_text(question, join).encode("utf-8")), unlocated)  # fmt: skip
    if not any(e.located for e in question.evidence):
        return _excluded(base, NO_EVIDENCE)
    if count == "all" and unlocated:
        return _excluded(base, NOT_ALL_LOCATED)
    prompt = joined(build_prompt(question.task, question.question, text), join)
    try:
        cut = cut_to(tokenizer, prompt, limit - len(ids), f"LooGLE question {question.source_id}")
    except PromptTooLong:
        return _excluded(base, NO_ROOM)
    if not evidence_inside(question, text, prompt.start, cut):
        return _excluded(base, OUTSIDE, len(cut.ids))
    return Planned(replace(base, prompt_tokens=len(cut.ids)), question, cut.ids, ids, join)


def question_only_logprob(tokenizer: Any, scorer: TargetScorer, planned: Planned) -> float:
    """log P(answer | question): the same template with an empty document, joined the same way."""
    q = planned.question
    alone, _ = tokenize_prompt(tokenizer, joined(build_prompt(q.task, q.question, ""), planned.join))
    return answer_logprob(scorer, alone, planned.answer)


def shared_logprobs(scorer: TargetScorer, items: list[tuple[list[int], list[int]]]) -> list[float]:
    """log P(answer | prompt) of each (prompt, answer) pair: the prompts' common first tokens run once
    through the model's body, each pair's own tokens after them, the answer's log-probs by the
    scorer's head (float64 sums), as ``answer_logprob`` computes each alone."""
    shared = common_prefix([Cut(prompt, len(prompt), 0) for prompt, _ in items])
    first = items[0][0][:shared]
    from transformers import DynamicCache  # with the model, not at import (the commands' start-up)

    cache = DynamicCache(config=scorer.model.config)
    with torch.inference_mode():
        if first:
            body_pass(scorer, first, cache)
        out = []
        for prompt, answer in items:
            hidden = body_pass(scorer, prompt[shared:] + answer[:-1], copy.deepcopy(cache))
            targets = torch.tensor(answer, dtype=torch.long)
            out.append(float(scorer.score_hidden(hidden[-len(answer) :], targets).sum()))
    return out


def body_pass(scorer: TargetScorer, ids: list[int], cache: Any) -> torch.Tensor:
    """The body's final hidden states of ``ids`` after what ``cache`` holds (extended in place)."""
    seq = torch.tensor([ids], dtype=torch.long)
    check_token_ids(seq, scorer.embedding_rows)
    out = scorer.body(input_ids=seq.to(scorer.input_device), past_key_values=cache, use_cache=True)
    return (out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0])[0]


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
    count: str = "all",
    join: str = "follows",
) -> list[AnswerGain]:
    """Every question at every limit (``texts``: the artifact's text of each document, by id; ``count``:
    ``all`` or ``some``; ``join``: ``follows`` or ``apart``; module doc), limit by limit, question by
    question."""
    if count not in COUNTS:
        raise PipelineError(f"setting count={count}: one of {', '.join(COUNTS)}")
    if join not in JOINS:
        raise PipelineError(f"setting join={join}: one of {', '.join(JOINS)}")
    questions = list(questions)
    alone: dict[str, float] = {}
    out: list[AnswerGain] = []
    for limit in limits:
        planned = [plan(tokenizer, q, texts[q.doc_id], limit, count, join) for q in questions]
        counted = [p for p in planned if isinstance(p, Planned)]
        with_document: dict[str, float] = {}
        for doc in dict.fromkeys(p.question.doc_id for p in counted):
            group = [p for p in counted if p.question.doc_id == doc]
            values = shared_logprobs(scorer, [(p.prompt, p.answer) for p in group])
            with_document |= {p.question.source_id: v for p, v in zip(group, values, strict=True)}
        for p in counted:
            if p.question.source_id not in alone:
                alone[p.question.source_id] = question_only_logprob(tokenizer, scorer, p)
        for p in planned:
            if isinstance(p, Planned):
                source = p.question.source_id
                p = replace(p.gain, with_document=with_document[source], question_only=alone[source])
            out.append(p)
    return out


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
        "n_not_all_located": sum(g.excluded == NOT_ALL_LOCATED for g in gains),
        "n_outside": sum(g.excluded == OUTSIDE for g in gains),
        "n_no_room": sum(g.excluded == NO_ROOM for g in gains),
        "gain_nats": float(nats.mean()) if counted else None,
        "gain_bits_per_byte": float(bpb.mean()) if counted else None,
        "gain_bits_per_byte_se": float(bpb.std(ddof=1) / math.sqrt(len(bpb))) if len(bpb) > 1 else None,
        "positive": int((nats > 0).sum()),
        "counted_unlocated_evidence": sum(g.unlocated for g in counted),
    }
