"""The LongPPL tasks' metrics in lm-eval, pooled over documents as `make score` pools them.

Each document contributes its sums (``pipeline.score.sums.Sums``): the NLL and the token count (or
soft weight) of a token subset for a perplexity, the NLL and the UTF-8 bytes for bits per byte. The
corpus value is the exponential of the summed NLL over the summed count (bits per byte: summed NLL in
bits over summed bytes), pooled by the score engine's own ``pool`` (``pipeline.score.sums``) and its
``perplexity``/``bits_per_byte``: the numbers of `make score`. A ``None`` item means
the metric does not exist for this artifact (LongPPL-soft on key spans alone): the value is then null.

Registering the metric names keeps lm-eval from looking them up in Hugging Face ``evaluate`` (a
download); ``bits_per_byte`` is lm-eval's own name, with our aggregation given in each task's
``metric_list``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lm_eval.api.metrics  # noqa: F401  (lm-eval's own metrics and aggregations, registered first)
from lm_eval.api.registry import metric_registry, register_aggregation, register_metric

from pipeline.score.sums import DocumentScore, Sums, pool

PERPLEXITY = "longppl_pooled_perplexity"
BITS_PER_BYTE = "longppl_pooled_bits_per_byte"
# metric -> (the aggregation, the subset of DocumentScore it pools, what it divides by)
METRICS: dict[str, tuple[str, str, str]] = {
    "longppl": (PERPLEXITY, "key", "n"),
    "longppl_soft": (PERPLEXITY, "soft", "n"),
    "ppl": (PERPLEXITY, "all", "n"),
    "bits_per_byte": (BITS_PER_BYTE, "all", "bytes"),
    "key_bits_per_byte": (BITS_PER_BYTE, "key", "bytes"),
}
Item = tuple[float, float] | None  # (NLL sum, count or bytes) of one document; None: no such metric


def pooled(items: Sequence[Item], denominator: str) -> Sums | None:
    """The documents' sums pooled as `make score` pools them (``sums.pool``); None if any is None."""
    if any(item is None for item in items):
        return None
    return pool(Sums(nll=nll, **{denominator: count}) for nll, count in items)


@register_aggregation(PERPLEXITY)
def pooled_perplexity(items: Sequence[Item]) -> float | None:
    total = pooled(items, "n")
    return None if total is None else total.perplexity()


@register_aggregation(BITS_PER_BYTE)
def pooled_bits_per_byte(items: Sequence[Item]) -> float | None:
    total = pooled(items, "bytes")
    return None if total is None else total.bits_per_byte()


def document_items(score: DocumentScore, has_soft_weights: bool) -> dict[str, Item]:
    """One document's item of every metric (what a task's ``process_results`` returns)."""
    items: dict[str, Item] = {}
    for metric, (_, subset, denominator) in METRICS.items():
        sums: Sums = getattr(score, subset)
        missing = subset == "soft" and not has_soft_weights
        items[metric] = None if missing else (sums.nll, getattr(sums, denominator))
    return items


def metric_list() -> list[dict[str, Any]]:
    """A task's ``metric_list``: every metric, its aggregation, lower is better."""
    return [
        {"metric": name, "aggregation": aggregation, "higher_is_better": False}
        for name, (aggregation, _, _) in METRICS.items()
    ]


def _items(items: Any) -> Any:
    """The function registered under each metric name: unused, the tasks compute their items."""
    return items


for _name, (_aggregation, _, _) in METRICS.items():
    if _name not in metric_registry:  # bits_per_byte: lm-eval's own
        register_metric(metric=_name, higher_is_better=False, aggregation=_aggregation)(_items)
