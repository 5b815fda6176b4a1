"""The forgetting curve's measurement: teacher-forced top-1 accuracy of the copy and LM inputs at
each length, their statistics, and the fine and coarse memory lengths (paper Table 3)."""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from scipy import stats
from tqdm.auto import tqdm

from pipeline.forgetting.samples import (
    Sample,
    build_input,
    draw_samples,
    grid_lengths,
    input_tokens,
    scored_positions,
)
from pipeline.models.logprobs import TargetScorer
from pipeline.models.top1 import top1_hits

FINE_THRESHOLD = 0.99  # fine-grained memory: copy accuracy above this
COARSE_MARGIN = 0.01  # coarse-grained memory: copy accuracy at least this far above LM accuracy
POINT_ERRORS = (RuntimeError, ValueError, IndexError)  # torch.OutOfMemoryError is a RuntimeError


@dataclass(frozen=True)
class CurveSettings:
    """What a curve's numbers depend on (besides the model and the text)."""

    source: str
    grid: str
    n: int
    R: int
    max_length: int
    min_length: int
    seed: int
    context: int
    beyond_context: bool
    bos_token_id: int
    eos_token_id: int | None
    head_chunk: int
    vocab_tile: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------------------------
# Accuracies and statistics


def input_accuracy(scorer: TargetScorer, ids: torch.Tensor, length: int) -> float:
    """Teacher-forced top-1 accuracy over the scored positions: one forward pass of the body, the
    output head only on the positions predicting the scored tokens, over vocabulary tiles."""
    targets = torch.as_tensor(scored_positions(length))
    hidden = scorer.hidden_states(ids[None])[0]
    hits = top1_hits(scorer, hidden[targets - 1], ids[targets])
    return float(hits.mean())


def point_statistics(copy: list[float], lm: list[float]) -> dict[str, Any]:
    """Mean, population std and the paired t-test's p-value (None when undefined, R < 2)."""
    copy_a, lm_a = np.asarray(copy), np.asarray(lm)
    p_value: float | None = None
    if len(copy_a) >= 2:
        if np.all(copy_a == lm_a):
            p_value = 1.0  # the reference's convention: identical samples
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                p = float(stats.ttest_rel(copy_a, lm_a).pvalue)
            p_value = None if math.isnan(p) else p
    return {
        "copy_mean": float(copy_a.mean()),
        "copy_std": float(copy_a.std()),
        "lm_mean": float(lm_a.mean()),
        "lm_std": float(lm_a.std()),
        "p_value": p_value,
    }


def measure_length(scorer: TargetScorer, settings: CurveSettings, samples: list[Sample], step: Any) -> dict:
    """One grid point: copy and LM accuracy of every sample (2R forward passes)."""
    length = len(samples[0].target)
    bos, eos = settings.bos_token_id, settings.eos_token_id
    copy, lm = [], []
    for sample in samples:
        for prefix, out in ((sample.target, copy), (sample.irrelevant, lm)):
            ids = build_input(prefix, sample.target, bos, eos)
            out.append(input_accuracy(scorer, ids, length))
            step(len(ids))
    return {"copy_accs": copy, "lm_accs": lm, **point_statistics(copy, lm)}


def measure_curve(
    scorer: TargetScorer, settings: CurveSettings, source: np.ndarray, progress: bool = True
) -> list[dict[str, Any]]:
    """Every grid point in order; a point that fails is kept with its error (no accuracies)."""
    has_eos = settings.eos_token_id is not None
    lengths = grid_lengths(settings.grid, settings.n, settings.max_length, settings.min_length)
    total = sum(2 * settings.R * input_tokens(x, has_eos) for x in lengths)
    points = []
    with tqdm(total=total, unit="tok", unit_scale=True, desc="forgetting curve", disable=not progress) as bar:
        for length in lengths:
            bar.set_postfix_str(f"L={length}")
            point = {
                "length": length,
                "input_tokens": input_tokens(length, has_eos),
                "scored_tokens": (length + 1) // 2,
                "beyond_context": input_tokens(length, has_eos) > settings.context,
            }
            samples = draw_samples(source, length, settings.R, settings.seed, settings.source)
            point["starts"] = [s.start for s in samples] if settings.source == "corpus" else None
            done = bar.n
            try:
                point.update(measure_length(scorer, settings, samples, bar.update), error=None)
            except POINT_ERRORS as exc:
                point["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
                bar.update(2 * settings.R * point["input_tokens"] - (bar.n - done))
            points.append(point)
    return points


def memory_lengths(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Fine and coarse memory lengths (paper Table 3) over the points that were measured: the
    largest L meeting each criterion (0 if none); ``*_censored`` when that is the largest L
    measured (the paper's ">")."""
    measured = [p for p in points if p.get("error") is None]
    largest = max((p["length"] for p in measured), default=0)
    fine = max((p["length"] for p in measured if p["copy_mean"] > FINE_THRESHOLD), default=0)
    coarse = max(
        (p["length"] for p in measured if p["copy_mean"] - p["lm_mean"] >= COARSE_MARGIN - 1e-12),
        default=0,
    )
    return {
        "fine": fine,
        "fine_censored": bool(fine and fine == largest),
        "coarse": coarse,
        "coarse_censored": bool(coarse and coarse == largest),
        "fine_threshold": FINE_THRESHOLD,
        "coarse_margin": COARSE_MARGIN,
        "largest_measured": largest,
    }
