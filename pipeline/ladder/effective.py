"""The effective context length: the shortest rung of the ladder whose LongPPL stays within a
tolerance of the full-context LongPPL, with a bootstrap interval over documents.

Per document i and rung r the ladder gives ``S[i, r]``, the key tokens' NLL sum, and ``N[i]``, the
key tokens (the same at every rung); the corpus value is pooled, as ``corpus_summary`` pools:
``m_r = sum_i S[i, r] / sum_i N[i]`` and LongPPL_r = exp(m_r). The last rung is full context.

- ``delta_r = m_r - m_full = ln(LongPPL_r / LongPPL_full)``; rung r is *within tolerance* eps when
  ``delta_r <= ln(1 + eps)`` (a relative tolerance on LongPPL is an absolute one on the mean NLL).
- A rung *limits* a key token when the token's position in the sequence is at least the rung's
  context limit W (earlier tokens take the first window, which is their whole context). A rung that
  limits no key token equals full context on them by construction: it says nothing about the model
  and counts as full (*uninformative*). Informative rungs are the lowest ones (W grows).
- The effective length is the smallest informative rung from which every informative rung up to
  full context is within tolerance ("stays within": a dip into the band followed by an excursion out
  of it does not count). None qualifies: right-censored, shown ``>W`` with W the largest
  informative rung, as the forgetting curve shows its lengths. The lowest rung qualifies:
  left-censored, shown ``<=W``.
- Interval: documents resampled with replacement (``numpy.random.default_rng(seed)``, one multinomial
  draw of counts per resample, the same draw for every rung, so rungs stay paired), the length
  recomputed per resample, and the percentile interval with ``method="inverted_cdf"`` so that both
  ends are rungs. A resample without key tokens, or in which no rung limits a key token, is dropped
  (and counted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

TOLERANCES = (0.01, 0.05, 0.1, 0.25)  # the console's and the results line's table of tolerances
Rung = int | None  # a context limit; None: full context


@dataclass(frozen=True)
class LadderSums:
    """What the effective length is read from: per document and rung, the key tokens' NLL sums."""

    rungs: tuple[Rung, ...]  # ascending context limits, full context (None) last
    key_nll: np.ndarray  # (D, R) key tokens' NLL sum
    key_n: np.ndarray  # (D,) key tokens
    limited: np.ndarray  # (D, R) key tokens whose context the rung limits (0 at full context)

    @classmethod
    def of_row(cls, row: dict[str, Any]) -> LadderSums:
        """The sums a results line of ``ladder.jsonl`` records."""
        rungs = row["rungs"]
        return cls(
            rungs=tuple(r["context_limit"] for r in rungs),
            key_nll=np.array([r["key_nll"] for r in rungs], dtype=float).T,
            key_n=np.array([d["n_key_tokens"] for d in rungs[-1]["documents"]], dtype=float),
            limited=np.array([r["key_limited"] for r in rungs], dtype=np.int64).T,
        )


def within(delta: np.ndarray, informative: np.ndarray, tau: float) -> np.ndarray:
    """The index of the effective length along the last axis: the first informative rung from which
    every informative rung is within ``tau``; the full rung's index when none is."""
    ok = (delta <= tau) | ~informative
    ok[..., -1] = True
    stays = np.flip(np.logical_and.accumulate(np.flip(ok, -1), -1), -1)
    first = stays.argmax(-1)
    first_informative = np.take_along_axis(informative, first[..., None], -1)[..., 0]
    return np.where(first_informative, first, delta.shape[-1] - 1)


def pooled(sums: LadderSums, counts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Mean key NLL per rung and which rungs are informative: of the documents, or of each resample
    (``counts``: (B, D) times each document is drawn)."""
    if counts is None:
        counts = np.ones((1, len(sums.key_n)), dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (counts @ sums.key_nll) / (counts @ sums.key_n)[:, None]
    informative = (counts @ sums.limited) > 0
    informative[:, -1] = False
    return mean, informative


def resamples(n_documents: int, bootstrap: int, seed: int) -> np.ndarray:
    """(B, D) counts: how often each document is drawn in each resample."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(n_documents, np.full(n_documents, 1 / n_documents), size=bootstrap)


def effective_length(
    sums: LadderSums, tolerance: float, *, bootstrap: int, seed: int, confidence: float
) -> dict[str, Any]:
    """The effective length at ``tolerance``, its interval, the share of resamples at each rung, and
    the same at each tolerance of ``TOLERANCES``; per rung, delta, its band and the recovered share."""
    mean, informative = pooled(sums)
    boot_mean, boot_informative = pooled(sums, resamples(len(sums.key_n), bootstrap, seed))
    usable = np.isfinite(boot_mean).all(1) & boot_informative.any(1)
    boot_mean, boot_informative = boot_mean[usable], boot_informative[usable]
    reading = {
        "tolerance": tolerance,
        **_reading(sums, mean, informative, boot_mean, boot_informative, tolerance, confidence),
        "confidence": confidence,
        "bootstrap": bootstrap,
        "seed": seed,
        "resamples_used": int(usable.sum()),
        "by_tolerance": [
            {
                "tolerance": eps,
                **_reading(sums, mean, informative, boot_mean, boot_informative, eps, confidence),
            }
            for eps in sorted({*TOLERANCES, tolerance})
        ],
    }
    for r in reading["by_tolerance"]:
        del r["shares"]
    return {"effective": reading, "rungs": rung_statistics(sums, mean, boot_mean, confidence)}


def _reading(
    sums: LadderSums,
    mean: np.ndarray,
    informative: np.ndarray,
    boot_mean: np.ndarray,
    boot_informative: np.ndarray,
    tolerance: float,
    confidence: float,
) -> dict[str, Any]:
    """The length (a rung, None: full context), its censoring, interval and shares at one tolerance."""
    tau = math.log1p(tolerance)
    if not informative.any() or not np.isfinite(mean).all():
        why = "no key tokens" if not sums.key_n.sum() else "no rung limits a key token"
        return {
            "length": None,
            "censored": None,
            "top": None,
            "interval": None,
            "shares": None,
            "undefined": why,
        }
    index = int(within(mean - mean[:, -1:], informative, tau)[0])
    boot = within(boot_mean - boot_mean[:, -1:], boot_informative, tau)
    tail = (1 - confidence) / 2
    low, high = (int(i) for i in np.quantile(boot, [tail, 1 - tail], method="inverted_cdf"))
    shares = np.bincount(boot, minlength=len(sums.rungs)) / max(len(boot), 1)
    censored = "right" if index == len(sums.rungs) - 1 else "left" if index == 0 else None
    return {
        "length": sums.rungs[index],
        "censored": censored,
        "top": sums.rungs[int(np.flatnonzero(informative[0])[-1])],  # the largest informative rung
        "interval": [sums.rungs[low], sums.rungs[high]],
        "shares": [float(s) for s in shares],
        "undefined": None,
    }


def rung_statistics(
    sums: LadderSums, mean: np.ndarray, boot_mean: np.ndarray, confidence: float
) -> list[dict[str, Any]]:
    """Per rung: delta (nats per key token), its band and the LongPPL band over the resamples, the
    share of the lowest rung's excess recovered, and the key tokens it limits."""
    tail = (1 - confidence) / 2
    m = mean[0]
    gap = m[0] - m[-1]
    out = []
    for r in range(len(sums.rungs)):
        finite = bool(np.isfinite(m[r]))
        deltas = boot_mean[:, r] - boot_mean[:, -1]
        band = np.quantile(deltas, [tail, 1 - tail]) if finite and len(deltas) else None
        ppl_band = np.quantile(np.exp(boot_mean[:, r]), [tail, 1 - tail]) if finite and len(deltas) else None
        out.append(
            {
                "delta": float(m[r] - m[-1]) if finite else None,
                "delta_band": None if band is None else [float(b) for b in band],
                "longppl_band": None if ppl_band is None else [float(b) for b in ppl_band],
                "recovered": float((m[0] - m[r]) / gap) if finite and gap != 0 else None,
                "n_key_limited": int(sums.limited[:, r].sum()),
                "informative": bool(sums.limited[:, r].sum() > 0 and r < len(sums.rungs) - 1),
            }
        )
    return out
