"""The context ladder's settings (``conf/ladder.yaml``), checked before anything loads.

The score settings of every rung (BOS, grid) are ``pipeline.settings.ScoreSettings``, with the rung's
``context_limit``; what is the ladder's own is here.
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import AfterValidator, Field
from pydantic.dataclasses import dataclass

from pipeline.definition import NotBool, Positive

TOLERANCES = (0.01, 0.05, 0.1, 0.25)  # the console's and the results line's table of tolerances
# The most bootstrap resamples: each holds one count per document (8 bytes) and one sum per rung, so
# 100000 resamples of 50 documents take 40 MB; percentile intervals need a few thousand.
MAX_BOOTSTRAP = 100_000


def _distinct(rungs: tuple[int, ...]) -> tuple[int, ...]:
    if len(set(rungs)) < len(rungs):
        raise ValueError("every rung must be a different context limit")
    return tuple(sorted(rungs))


Rung = Annotated[int, NotBool, Field(ge=2)]
Rungs = Annotated[tuple[Rung, ...], Field(min_length=1), AfterValidator(_distinct)]


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


@dataclass(frozen=True)
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
