"""The context ladder's passes: the score stage at each context limit of a ladder and at full context,
per document and over the corpus, each rung exactly what ``make score ... context_limit=W`` computes.

The rungs come from one call of the score engine (``pipeline.score.engine.score_limits``), which
shares the tokenization, the alignment and the full pass across them; the ladder chooses the rungs
(``default_ladder``), checks them against the model (``check_rungs``) and gathers the key tokens' sums
(``pipeline.ladder.effective.LadderSums``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.ladder.effective import LadderSums, Rung
from pipeline.ladder.settings import LadderSettings
from pipeline.models.loading import LoadedModel
from pipeline.score.engine import ScoreResult, Tokenized, score_limits, tokenize
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


def check_rungs(lm: LoadedModel, rungs: tuple[int, ...], texts: Tokenized) -> None:
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
    for doc_id, length in zip(texts.doc_ids, texts.lengths, strict=True):
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
    compute: Compute,
    *,
    progress: bool = False,
) -> LadderRun:
    """``lm`` against ``artifact`` at every rung of the ladder and at full context."""
    if settings.context_limit is not None or settings.allow_truncation:
        raise PipelineError("the ladder sets context_limit per rung and scores whole documents")
    texts = tokenize(artifact, lm, settings, documents=ladder.documents)
    proper = ladder.ladder or default_ladder(artifact, max(texts.lengths))
    check_rungs(lm, proper, texts)
    rungs: tuple[Rung, ...] = (*proper, None)
    scored = score_limits(texts, lm, compute, rungs, progress=progress)
    sums = LadderSums(rungs, key_nll=scored.key_nll, key_n=scored.key_n, limited=scored.key_limited)
    seconds = [r.seconds for r in scored.results]
    return LadderRun(rungs, scored.results, sums, seconds, scored.copied)
