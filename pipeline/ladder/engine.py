"""The context ladder's passes: the score stage at each context limit of a ladder, per document and
over the corpus, each rung exactly what ``make score ... context_limit=W`` computes.

Every rung is built from the score stage's own functions (``pipeline.score.documents``:
``model_sequence``, ``sequence_logprobs``, ``align_tokens``, ``document_score``; ``pipeline.score.engine``:
``result``), so its numbers are ``make score``'s to every digit. What does not depend on the context
limit is computed once per document and shared by the rungs: the tokenization, the alignment of the
key spans and soft weights onto the tokens, the byte and character counts. A document whose sequence
fits a rung's limit is, at that rung, the full-context pass (``context_limited_logprobs`` runs that
very pass): its log-probs are the full rung's, not computed again. Every other (document, rung) runs
all of the rung's windows: PPL, LongPPL-soft and bits per byte need every token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from pipeline.artifact.reader import ArtifactDocument
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.ladder.effective import LadderSums, Rung
from pipeline.ladder.settings import LadderSettings
from pipeline.models.loading import LoadedModel, eval_mode
from pipeline.models.logprobs import TargetScorer, scorer_for
from pipeline.score.documents import (
    ModelSequence,
    align_tokens,
    document_score,
    model_sequence,
    sequence_logprobs,
)
from pipeline.score.engine import ScoreResult, pick_documents, result, settings_record
from pipeline.score.sums import DocumentScore
from pipeline.settings import Compute, ScoreSettings


@dataclass
class LadderRun:
    """The ladder of one model on one artifact: per rung, the score stage's result."""

    rungs: tuple[Rung, ...]  # ascending context limits, full context (None) last
    results: list[ScoreResult]  # per rung, as `make score ... context_limit=W` gives it
    sums: LadderSums
    seconds: list[float]  # per rung, model time
    copied: list[int]  # per rung, documents whose sequence fits it (the full pass's log-probs)


def default_ladder(artifact: KeyTokenArtifact, longest: int) -> tuple[int, ...]:
    """Powers of two from the artifact's K/2 while shorter than the longest sequence (BOS included)."""
    start = max(2, int(artifact.settings["K"]) // 2)
    rungs = []
    while start < longest:
        rungs.append(start)
        start *= 2
    if not rungs:
        raise PipelineError(
            f"the artifact's longest document has {longest} tokens, no more than the lowest default rung "
            f"(K/2 = {max(2, int(artifact.settings['K']) // 2)}): pass ladder=[<context limits>]"
        )
    return tuple(rungs)


def check_rungs(
    lm: LoadedModel, rungs: tuple[int, ...], docs: list[ArtifactDocument], sequences: list[ModelSequence]
) -> None:
    """Every rung and every whole document must fit the model's context (the full rung needs them)."""
    context = lm.context_length
    if context is None or not sequences:
        return
    n_prefix = sequences[0].n_prefix
    too_long = [w for w in rungs if w + n_prefix > context]
    if too_long:
        raise PipelineError(
            f"ladder rung {too_long[0]} exceeds {lm.source.spec}'s context of {context} tokens"
            + (" (with the BOS)" if n_prefix else "")
            + f": use rungs of at most {context - n_prefix} tokens"
        )
    for doc, s in zip(docs, sequences, strict=True):
        if len(s.seq) > context:
            raise PipelineError(
                f"document '{doc.doc_id}' has {len(s.seq)} tokens for {lm.source.spec}, more than its "
                f"context of {context}: the ladder's full-context rung needs every document whole (use an "
                "artifact of shorter documents, or `make score ... context_limit=<tokens>` for single limits)"
            )


@dataclass
class _Tally:
    """What the rungs gather document by document."""

    n_rungs: int
    scores: list[list[DocumentScore]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    copied: list[int] = field(default_factory=list)
    limited: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.scores = [[] for _ in range(self.n_rungs)]
        self.seconds, self.copied = [0.0] * self.n_rungs, [0] * self.n_rungs


def run_ladder(
    artifact: KeyTokenArtifact,
    lm: LoadedModel,
    ladder: LadderSettings,
    settings: ScoreSettings,
    compute: Compute,
    *,
    progress: bool = False,
) -> LadderRun:
    """``lm`` against ``artifact`` at every rung of the ladder and at full context."""
    if settings.context_limit is not None or settings.allow_truncation:
        raise PipelineError("the ladder sets context_limit per rung and scores whole documents")
    scorer = scorer_for(lm, compute)
    docs = pick_documents(artifact, ladder.documents)
    # With a context limit the score stage takes the whole text, however long (checked below).
    sequences = [model_sequence(lm, doc, replace(settings, context_limit=2)) for doc in docs]
    proper = ladder.ladder or default_ladder(artifact, max(len(s.seq) for s in sequences))
    check_rungs(lm, proper, docs, sequences)
    rungs: tuple[Rung, ...] = (*proper, None)
    tally = _Tally(len(rungs))
    bar = tqdm(total=len(docs) * len(rungs), desc="document x rung", unit="pass", disable=not progress)
    with eval_mode(lm.model), bar:
        scorer.check_against_full_forward()
        for doc, sequence in zip(docs, sequences, strict=True):
            ladder_document(lm, scorer, doc, sequence, rungs, settings, tally, bar)
    records = [settings_record(replace(settings, context_limit=w), compute, lm, scorer) for w in rungs]
    results = [
        result(artifact, scores, record, seconds)
        for scores, record, seconds in zip(tally.scores, records, tally.seconds, strict=True)
    ]
    sums = LadderSums(
        rungs,
        key_nll=np.array([[s[i].key.nll for s in tally.scores] for i in range(len(docs))]),
        key_n=np.array([s.key.n for s in tally.scores[-1]]),
        limited=np.array(tally.limited, dtype=np.int64),
    )
    return LadderRun(rungs, results, sums, tally.seconds, tally.copied)


def ladder_document(
    lm: LoadedModel,
    scorer: TargetScorer,
    doc: ArtifactDocument,
    sequence: ModelSequence,
    rungs: tuple[Rung, ...],
    settings: ScoreSettings,
    tally: _Tally,
    bar: Any,
) -> None:
    """One document at every rung: the full pass first (its alignment serves every rung), then each
    rung's windows, or the full pass's log-probs where the sequence fits the rung."""
    started = time.time()
    full = sequence_logprobs(lm, scorer, sequence, None, doc.doc_id)
    tally.seconds[-1] += time.time() - started
    aligned = align_tokens(doc, full, settings)
    # positions in the sequence of the key tokens (each predicted from the tokens before it)
    key_positions = np.flatnonzero(aligned.scored)[aligned.key] + sequence.n_prefix
    limited = []
    for r, limit in enumerate(rungs):
        started = time.time()
        fits = limit is None or len(sequence.seq) <= limit
        tokens = full if fits else sequence_logprobs(lm, scorer, sequence, limit, doc.doc_id)
        tally.scores[r].append(document_score(doc.doc_id, tokens, aligned))
        tally.seconds[r] += time.time() - started
        tally.copied[r] += fits and limit is not None
        limited.append(0 if fits else int((key_positions >= limit).sum()))
        bar.update()
    tally.limited.append(limited)
