"""The LongPPL tasks' metrics in lm-eval: every metric of the registry (``pipeline.metric_registry``),
pooled over documents as `make score` pools them.

Each document contributes, per metric, the sums of the metric's token subset
(``pipeline.score.sums.Sums``): ``[NLL, tokens, bytes]`` (the tokens: the soft weights' sum for
LongPPL-soft). The corpus value is the metric's value of the documents' sums pooled by the score
engine's own ``pool`` (``pipeline.score.sums``): the numbers of `make score`. A ``None`` item means the
metric does not exist for this artifact (LongPPL-soft on key spans alone): the value is then null.

Each metric is registered in lm-eval under its lm-eval name, with an aggregation of its own
(``longppl_pooled_<name>``), when a task's ``metric_list`` is made: a metric registered after this
module was imported is there too. Registering the names keeps lm-eval from looking them up in Hugging
Face ``evaluate`` (a download); ``bits_per_byte`` is lm-eval's own name, with our aggregation given in
each task's ``metric_list``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import lm_eval.api.metrics  # noqa: F401  (lm-eval's own metrics and aggregations, registered first)
from lm_eval.api.registry import aggregation_registry, metric_registry, register_aggregation, register_metric

from pipeline.metric_registry import NEEDS_TOKEN_VALUES, Metric, metric, metrics
from pipeline.score.sums import DocumentScore, Sums, pool

AGGREGATION = "longppl_pooled_{}"  # a metric's aggregation in lm-eval, by the metric's name
Item = tuple[float, float, int] | None  # (NLL, tokens, bytes) of one document's subset; None: no such metric


def pooled(items: Sequence[Item]) -> Sums | None:
    """The documents' sums pooled as `make score` pools them (``sums.pool``); None if any is None."""
    if any(item is None for item in items):
        return None
    return pool(Sums(n=n, nll=nll, bytes=size) for nll, n, size in items)


def pooled_value(name: str, items: Sequence[Item]) -> float | None:
    """Metric ``name`` of the documents' pooled sums (its lm-eval aggregation)."""
    total = pooled(items)
    return None if total is None else metric(name).value(total)


def document_items(score: DocumentScore, has_soft_weights: bool) -> dict[str, Item]:
    """One document's item of every metric, by lm-eval name (what a task's ``process_results`` returns)."""
    items: dict[str, Item] = {}
    for m in metrics():
        sums: Sums = getattr(score, m.subset)
        missing = m.subset in NEEDS_TOKEN_VALUES and not has_soft_weights
        items[m.lmeval_name] = None if missing else (sums.nll, sums.n, sums.bytes)
    return items


def metric_list() -> list[dict[str, Any]]:
    """A task's ``metric_list``: every metric, its aggregation, whether higher is better."""
    for m in metrics():
        register_in_lmeval(m)
    return [
        {
            "metric": m.lmeval_name,
            "aggregation": AGGREGATION.format(m.name),
            "higher_is_better": m.higher_is_better,
        }
        for m in metrics()
    ]


def register_in_lmeval(m: Metric) -> None:
    """Metric ``m`` and its aggregation in lm-eval's registries, once (lm-eval's own name kept)."""
    aggregation = AGGREGATION.format(m.name)
    if aggregation not in aggregation_registry:
        register_aggregation(aggregation)(partial(pooled_value, m.name))
    if m.lmeval_name not in metric_registry:  # bits_per_byte: lm-eval's own
        register_metric(metric=m.lmeval_name, higher_is_better=m.higher_is_better, aggregation=aggregation)(
            _items
        )


def _items(items: Any) -> Any:
    """The function registered under each metric name: unused, the tasks compute their items."""
    return items


for _metric in metrics():
    register_in_lmeval(_metric)
