"""Sufficient statistics of the score stage's metrics and how documents pool into a corpus.

Per document, per token subset (all tokens for PPL, key tokens for LongPPL, weights for LongPPL-soft,
each (alpha, beta) of the grid): the count and the NLL sum, and the UTF-8 bytes for bits per byte
(``pipeline.score.bpb``). Each metric of the registry (``pipeline.metric_registry``) is a value of one
subset's sums: per document of the document's, per corpus of the documents' pooled. The corpus values
are token-weighted, as in the paper: the exponential of the mean negative log-likelihood over all
scored tokens of all documents (``corpus_summary``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.metric_registry import SUBSETS, metrics


@dataclass
class Sums:
    """Sufficient statistics for exp(mean NLL) over a token subset: count and NLL sum; and for bits
    per byte, the UTF-8 bytes of the subset's characters (``pipeline.score.bpb``; 0: not counted)."""

    n: float = 0.0
    nll: float = 0.0
    bytes: int = 0

    def add(self, nll: np.ndarray, weight: np.ndarray | None = None) -> None:
        if weight is None:
            self.n += float(len(nll))
            self.nll += float(nll.sum())
        else:
            self.n += float(weight.sum())
            self.nll += float((weight * nll).sum())

    def merge(self, other: Sums) -> None:
        """Adds another subset's sums (a corpus from its documents)."""
        self.n += other.n
        self.nll += other.nll
        self.bytes += other.bytes

    def perplexity(self) -> float | None:
        return math.exp(self.nll / self.n) if self.n > 0 else None

    def bits_per_byte(self) -> float | None:
        return self.nll / (math.log(2) * self.bytes) if self.bytes > 0 else None


@dataclass
class DocumentScore:
    doc_id: str
    n_tokens: int  # evaluated-model tokens of the text
    truncated: bool
    all: Sums = field(default_factory=Sums)
    key: Sums = field(default_factory=Sums)
    soft: Sums = field(default_factory=Sums)
    grid: dict[str, Sums] = field(default_factory=dict)
    key_chars: int = 0
    covered_key_chars: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "doc_id": self.doc_id,
            **metric_values(self),
            "n_tokens": self.n_tokens,
            "n_scored": int(self.all.n),
            "n_key_tokens": int(self.key.n),
            "truncated": self.truncated,
            "key_chars": self.key_chars,
            "covered_key_chars": self.covered_key_chars,
            "n_bytes": self.all.bytes,
            "n_key_bytes": self.key.bytes,
        }


def metric_values(sums: DocumentScore) -> dict[str, float | None]:
    """Every registered metric's value of a document's sums, or of a corpus's (``corpus_summary``)."""
    return {m.name: m.value(getattr(sums, m.subset)) for m in metrics()}


def grid_label(alpha: float, beta: float) -> str:
    return f"alpha={alpha:g},beta={beta:g}"


def pool(parts: Iterable[Sums]) -> Sums:
    """The documents' sums of one token subset added up, in document order: how every corpus value is
    pooled (`make score`'s ``corpus_summary``, lm-eval's aggregations)."""
    total = Sums()
    for part in parts:
        total.merge(part)
    return total


def corpus_summary(scores: list[DocumentScore]) -> dict[str, Any]:
    """Token-weighted corpus values over all documents."""
    pooled = {name: pool(getattr(s, name) for s in scores) for name in SUBSETS}
    total = DocumentScore("corpus", sum(s.n_tokens for s in scores), False, **pooled)  # the corpus's sums
    labels = dict.fromkeys(label for s in scores for label in s.grid)
    grid = {label: pool(s.grid[label] for s in scores if label in s.grid) for label in labels}
    key_chars = sum(s.key_chars for s in scores)
    return {
        **metric_values(total),
        "n_tokens": int(total.all.n),
        "n_key_tokens": int(total.key.n),
        "key_char_coverage": sum(s.covered_key_chars for s in scores) / key_chars if key_chars else None,
        "n_documents": len(scores),
        "n_truncated": sum(s.truncated for s in scores),
        "n_bytes": total.all.bytes,
        "n_key_bytes": total.key.bytes,
        "grid": {k: {"longppl": v.perplexity(), "n_key_tokens": int(v.n)} for k, v in grid.items()},
    }


def _weighted_per_document(
    documents: list[dict[str, Any]], metric: str, weight: str
) -> list[tuple[float, int]]:
    """(per-document value, weight) of the documents that have both, as the official loop keeps them:
    a document without key tokens is left out of LongPPL and kept in PPL."""
    return [(d[metric], d[weight]) for d in documents if d[metric] is not None and d[weight]]


OFFICIAL_WEIGHTS = (("ppl", "n_tokens"), ("longppl", "n_key_tokens"))


def official_aggregate(documents: list[dict[str, Any]]) -> dict[str, float | None]:
    """The corpus values as the official ``perplexity.py`` reports them since its commit a7082c3 ("fix
    bug in calculating ppl"; README table at 1decd2a, the commit of the shipped span files): the
    per-document values combined as exp(sum_i n_i ln v_i / sum_i n_i), with n_i the document's tokens
    for PPL (all of them, the unscored first one too) and its key tokens for LongPPL. That is the
    exponential of the token-weighted mean NLL, within about 1e-10 of ``corpus_summary``'s pooled
    value on the paper's documents (the weights are n_i, not the n_i - 1 tokens scored without BOS)."""
    out: dict[str, float | None] = {}
    for metric, weight in OFFICIAL_WEIGHTS:
        pairs = _weighted_per_document(documents, metric, weight)
        total = sum(w for _, w in pairs)
        out[metric] = math.exp(sum(w * math.log(v) for v, w in pairs) / total) if total else None
    return out


def official_aggregate_before_a7082c3(documents: list[dict[str, Any]]) -> dict[str, float | None]:
    """The corpus values of the paper's Table 5 and of the official README before commit a7082c3
    (e.g. Qwen2-7B: LongPPL 2.99 / 2.73 / 2.29, PPL 4.97): the token-weighted *arithmetic* mean of the
    per-document values, sum_i n_i v_i / sum_i n_i (same weights as ``official_aggregate``); by
    Jensen's inequality never below it. Compare the paper's printed table with this one only."""
    out: dict[str, float | None] = {}
    for metric, weight in OFFICIAL_WEIGHTS:
        pairs = _weighted_per_document(documents, metric, weight)
        total = sum(w for _, w in pairs)
        out[metric] = sum(v * w for v, w in pairs) / total if total else None
    return out
