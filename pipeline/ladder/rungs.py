"""The context ladder's rungs: the context limits it scores at, each rung exactly what ``make score ...
context_limit=W`` computes, and full context.

The ladder only picks the rungs (``default_ladder``) and checks them against the model
(``check_rungs``); one call of the score engine (``pipeline.score.engine.score_texts``) scores them
all, sharing the tokenization, the alignment and the full pass, and ``run_ladder`` gathers the key
tokens' sums (``pipeline.ladder.effective.LadderSums``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator, Field
from pydantic.dataclasses import dataclass as settings_dataclass

from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.definition import NotBool, Positive
from pipeline.errors import PipelineError, settings_type
from pipeline.ladder.effective import LadderSums, Rung
from pipeline.models.loading import LoadedModel
from pipeline.score.engine import ScoreResult, Scoring, Texts, score_texts, texts_of
from pipeline.settings import ScoreSettings

# The most bootstrap resamples: each holds one count per document (8 bytes) and one sum per rung, so
# 100000 resamples of 50 documents take 40 MB; percentile intervals need a few thousand.
MAX_BOOTSTRAP = 100_000


def _distinct(rungs: tuple[int, ...]) -> tuple[int, ...]:
    if len(set(rungs)) < len(rungs):
        raise ValueError("every rung must be a different context limit")
    return tuple(sorted(rungs))


RungSetting = Annotated[int, NotBool, Field(ge=2)]
Rungs = Annotated[tuple[RungSetting, ...], Field(min_length=1), AfterValidator(_distinct)]


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


@settings_type
@settings_dataclass(frozen=True)
class LadderSettings:
    """Which context limits (rungs) to score at, and how the effective context length is read."""

    # Context limits in tokens (the score stage's context_limit), full context always added; None:
    # powers of two from the artifact's K/2 while shorter than its longest document.
    ladder: Rungs | None = None
    # A rung is within tolerance when its LongPPL is at most (1 + tolerance) x the full-context LongPPL.
    tolerance: Annotated[float, Field(gt=0), AfterValidator(_finite)] = 0.05
    bootstrap: Annotated[int, NotBool, Field(gt=0, le=MAX_BOOTSTRAP)] = 2000  # resamples of the documents
    seed: Annotated[int, NotBool, Field(ge=0)] = 0  # the resamples' numpy.random.default_rng seed
    confidence: Annotated[float, Field(gt=0, lt=1)] = 0.95  # the interval's coverage
    documents: Positive | None = None  # the first N documents of the artifact; None: all


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


def check_rungs(lm: LoadedModel, rungs: tuple[int, ...], texts: Texts) -> None:
    """Every rung and every whole document must fit the model's context (the full rung needs them)."""
    context = lm.context_length
    if context is None or not texts.docs:
        return
    n_prefix = texts.n_prefix
    too_long = [w for w in rungs if w + n_prefix > context]
    if too_long:
        raise PipelineError(
            f"ladder rung {too_long[0]} exceeds {lm.source.spec}'s context of {context} tokens"
            + (" (with the BOS)" if n_prefix else "")
            + f": use rungs of at most {context - n_prefix} tokens"
        )
    for doc_id, length in zip((d.doc_id for d in texts.docs), texts.lengths, strict=True):
        if length > context:
            raise PipelineError(
                f"document '{doc_id}' has {length} tokens for {lm.source.spec}, more than its "
                f"context of {context}: the ladder's full-context rung needs every document whole (use an "
                "artifact of shorter documents, or `make score ... context_limit=<tokens>` for single limits)"
            )


def run_ladder(
    artifact: KeyTokenArtifact,
    lm: LoadedModel,
    ladder: LadderSettings,
    settings: ScoreSettings,
    scoring: Scoring,
    *,
    progress: bool = False,
) -> LadderRun:
    """``lm`` against ``artifact`` at every rung of the ladder and at full context."""
    if settings.context_limit is not None or settings.allow_truncation:
        raise PipelineError("the ladder sets context_limit per rung and scores whole documents")
    texts = texts_of(artifact, lm, settings, documents=ladder.documents)
    proper = ladder.ladder or default_ladder(artifact, max(texts.lengths))
    check_rungs(lm, proper, texts)
    rungs: tuple[Rung, ...] = (*proper, None)
    scored = score_texts(texts, lm, scoring, rungs, progress=progress)
    sums = LadderSums(rungs, key_nll=scored.key_nll, key_n=scored.key_n, limited=scored.key_limited)
    return LadderRun(rungs, scored.results, sums, scored.seconds, scored.copied)
