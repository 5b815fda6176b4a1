"""The key-token definition: its parameters (``KeyTokenDefinition``) and its rule.

LSD = LCL - short, with LCL = log P(x_i | x_<i) and short = log P(x_i | last K..K+d-1 tokens).
A key token has LSD > alpha and LCL > beta (paper Eq. 4); its soft weight is min(exp(LSD), gamma)
(Eq. 7). Tokens without a short context have no LSD, no soft weight, and are never key. Key tokens
that touch or overlap merge into character spans, the artifact's contract with any tokenizer.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Annotated, Any

import numpy as np
from pydantic import BeforeValidator, Field
from pydantic.dataclasses import dataclass

from pipeline.errors import settings_type


def _not_bool(value: Any) -> Any:
    """``True`` is not the number 1 here (``K=True`` is a mistake, not K=1)."""
    if isinstance(value, bool):
        raise ValueError(f"{value} is a boolean, not a number")
    return value


NotBool = BeforeValidator(_not_bool)
Positive = Annotated[int, NotBool, Field(gt=0)]
Finite = Annotated[float, NotBool, Field(allow_inf_nan=False)]

# The (alpha, beta) pairs of the paper's Table 2, re-thresholded from stored LSD and LCL.
PAPER_GRID: tuple[tuple[float, float], ...] = ((2.0, -2.0), (2.0, -1.0), (1.0, -2.0), (1.0, -1.0))


@settings_type
@dataclass(frozen=True)
class KeyTokenDefinition:
    """What makes a token key, with the paper's defaults (Eq. 2-4, 7; Appendix A.1)."""

    K: Positive = 4096  # short context length (tokens)
    d: Positive = 1024  # sliding-window step: one short pass of K + d tokens scores d tokens
    alpha: Finite = 2.0  # key token: LSD > alpha ...
    beta: Finite = -2.0  # ... and LCL > beta
    gamma: Annotated[Finite, Field(gt=0)] = 5.0  # soft weight: min(exp(LSD), gamma)
    short_window_bos: bool = True  # BOS before every short window (false: the official package)

    def record(self) -> dict[str, Any]:
        """The definition by field name, as manifests and results record it."""
        return asdict(self)


DEFINITION_FIELDS = tuple(f.name for f in fields(KeyTokenDefinition))


def long_short_difference(long: np.ndarray, short: np.ndarray) -> np.ndarray:
    """LSD per token (float64); NaN where either log-prob is missing."""
    return np.asarray(long, dtype=np.float64) - np.asarray(short, dtype=np.float64)


def is_key(lsd: np.ndarray, long: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """The paper's indicator: LSD > alpha and LCL > beta (False where LSD is missing)."""
    with np.errstate(invalid="ignore"):
        return (lsd > alpha) & (np.asarray(long, dtype=np.float64) > beta)


def no_key_reason(alpha: float, beta: float, lsd: np.ndarray | None = None) -> str:
    """Why a run has no key token, for the summary: a beta no log-probability exceeds, no token with a
    short context, or none with LSD above alpha (``lsd``: the tokens' LSD, NaN without short context)."""
    if beta >= 0:
        return (
            f"beta={beta:g} admits none, since LCL is a log-probability, at most 0 (the paper's beta is "
            "-2); LongPPL is n/a, LongPPL-soft and the alpha/beta grid are unaffected"
        )
    if lsd is not None and not np.isfinite(lsd).any():
        return "no token has a short context (every document is at most K tokens long): LongPPL is n/a"
    return f"no token has LSD > alpha={alpha:g} and LCL > beta={beta:g}: LongPPL is n/a"


def soft_weight(lsd: np.ndarray, gamma: float) -> np.ndarray:
    """min(exp(LSD), gamma); NaN where LSD is missing."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.minimum(np.exp(lsd), gamma)


def merge_spans(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge character intervals [start, end) that touch or overlap, in text order.

    Returns the merged (starts, ends) and how many input intervals went into each. Key tokens that
    follow each other become one span; byte-fallback tokens that share one character's span merge
    into it. Empty intervals merge into a neighbour they touch or stand alone.
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    if len(starts) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy(), empty.copy()
    order = np.lexsort((ends, starts))
    starts, ends = starts[order], ends[order]
    running_end = np.maximum.accumulate(ends)
    new_group = np.ones(len(starts), dtype=bool)
    new_group[1:] = starts[1:] > running_end[:-1]
    group = np.cumsum(new_group) - 1
    merged_starts = starts[new_group]
    merged_ends = np.maximum.reduceat(ends, np.flatnonzero(new_group))
    counts = np.bincount(group)
    return merged_starts, merged_ends, counts.astype(np.int64)
