"""One model's context ladder as a results line: the rungs' passes (``pipeline.ladder.rungs``), the
effective context length (``pipeline.ladder.effective``) and the provenance of ``make score``'s lines
(``pipeline.results.score.score_row`` of the full rung). The command (``python -m pipeline.commands.ladder``,
``conf/ladder.yaml``) adds the picture, the results file and the summary."""

from __future__ import annotations

import time
from typing import Any

from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.ladder.effective import effective_length
from pipeline.ladder.rungs import LadderRun, run_ladder
from pipeline.ladder.settings import LadderSettings
from pipeline.models.loading import LoadedModel
from pipeline.results.ladder import ladder_row
from pipeline.results.score import score_row
from pipeline.settings import Compute, ScoreSettings


def ladder_line(
    artifact: KeyTokenArtifact,
    lm: LoadedModel,
    ladder: LadderSettings,
    settings: ScoreSettings,
    compute: Compute,
    *,
    model_name: str,
    progress: bool = False,
    started: float | None = None,
) -> dict[str, Any]:
    """The ladder of ``lm`` on ``artifact``: its results line, without the picture's path (``plot``)
    until the command writes it. ``started``: when the run began (its wall time is recorded)."""
    started = started or time.time()
    passes = run_ladder(artifact, lm, ladder, settings, compute, progress=progress)
    reading = effective_length(
        passes.sums,
        ladder.tolerance,
        bootstrap=ladder.bootstrap,
        seed=ladder.seed,
        confidence=ladder.confidence,
    )
    base = score_row(model_name, lm, passes.results[-1], time.time() - started)
    return ladder_row(
        base,
        ladder_settings(passes, ladder, base["settings"]),
        rung_lines(passes, reading["rungs"]),
        reading["effective"],
        seconds=time.time() - started,
        plot=None,
    )


def ladder_settings(passes: LadderRun, ladder: LadderSettings, scored: dict[str, Any]) -> dict[str, Any]:
    """The full rung's score settings (the rungs differ only in ``context_limit``) and the ladder's."""
    return {
        **{k: v for k, v in scored.items() if k != "context_limit"},
        "ladder": [w for w in passes.rungs if w is not None],
        "ladder_setting": None if ladder.ladder is None else list(ladder.ladder),
        "tolerance": ladder.tolerance,
        "bootstrap": ladder.bootstrap,
        "seed": ladder.seed,
        "confidence": ladder.confidence,
        "documents": ladder.documents,
    }


def rung_lines(passes: LadderRun, statistics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rung: the score stage's corpus and per-document values; per document, the key tokens'
    NLL sum and how many of them the rung limits; the model time, the documents the full pass
    served, and the rung's statistics."""
    return [
        {
            "context_limit": limit,
            "corpus": scored.corpus,
            "documents": scored.documents,
            "key_nll": [float(x) for x in passes.sums.key_nll[:, r]],
            "key_limited": [int(x) for x in passes.sums.limited[:, r]],
            "copied_documents": passes.copied[r],
            "seconds": round(passes.seconds[r], 3),
            **statistics[r],
        }
        for r, (limit, scored) in enumerate(zip(passes.rungs, passes.results, strict=True))
    ]
