"""The metrics of a scored model, declared once, as lm-eval's ``register_metric`` declares its own.

A metric is a value of one token subset's sums (``pipeline.score.sums.Sums``: the count, or the soft
weights' sum, the NLL sum and the UTF-8 bytes): PPL of every scored token (``all``), LongPPL of the key
tokens (``key``), LongPPL-soft of every token weighted by its soft weight (``soft``), and bits per byte
of the first two. Its value per document is the function of the document's sums, its corpus value the
same function of the documents' sums pooled (``pipeline.score.sums.pool``). Everything that shows or
checks a metric takes it from here: the score line's per-document and corpus values
(``pipeline.score.sums``), the results schema and the leaderboard frame (``pipeline.results.score``,
``pipeline.results.lmeval``), lm-eval's metrics and aggregations (``pipeline.lmeval.metrics``), the
leaderboard's columns and ``make score``'s summary (``pipeline.reporting``). A new metric is one
``register_metric`` call; one that needs a token subset the sums do not hold yet needs that subset too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from pipeline.errors import PipelineError

Subset = Literal["all", "key", "soft"]
SUBSETS: tuple[Subset, ...] = ("all", "key", "soft")
# The subsets an artifact of key spans alone (kind key_spans: no per-token values) cannot give: a metric
# of them is null there, with the reason (``pipeline.score.engine.unavailable_metrics``).
NEEDS_TOKEN_VALUES: tuple[Subset, ...] = ("soft",)
# How the results schema checks a value (``pipeline.results.score``): a perplexity is at least 1, bits
# per byte at least 0, a fraction in [0, 1], a number any finite number.
Kind = Literal["perplexity", "bits", "fraction", "number"]
KINDS: tuple[Kind, ...] = ("perplexity", "bits", "fraction", "number")
# The names a score line's corpus values and the leaderboard's frame use for other things than metrics.
RESERVED = (
    "n_tokens", "n_key_tokens", "key_char_coverage", "n_documents", "n_truncated", "n_bytes", "n_key_bytes",
    "grid", "unavailable", "doc_id", "n_scored", "truncated", "key_chars", "covered_key_chars", "line",
    "result_id", "model_name", "artifact", "fingerprint", "contents", "identity", "settings", "model",
    "partial", "context_limit", "date", "rank", "entry",
)  # fmt: skip
NAME = re.compile(r"[a-z][a-z0-9_]*")  # a JSON key, a CSV column and an lm-eval metric ("<metric>,<filter>")
RANKED_BY = "longppl"  # the metric the leaderboard sorts and ranks its entries by


class TokenSums(Protocol):
    """What a metric reads of a token subset (``pipeline.score.sums.Sums``)."""

    n: float
    nll: float
    bytes: int

    def perplexity(self) -> float | None: ...

    def bits_per_byte(self) -> float | None: ...


@dataclass(frozen=True)
class Metric:
    """One metric: its key in results and frames (``name``), what people read (``label``), the token
    subset it reads, its value of that subset's sums (None: undefined, e.g. no key token), how the
    results schema checks the value, and its name in lm-eval (``lmeval_name``; default ``name``)."""

    name: str
    label: str
    subset: Subset
    value: Callable[[TokenSums], float | None]
    kind: Kind
    lmeval_name: str
    higher_is_better: bool = False


REGISTRY: dict[str, Metric] = {}  # by name, in the order registered: the order every output shows


def register_metric(
    name: str,
    *,
    label: str,
    subset: Subset,
    kind: Kind,
    lmeval_name: str | None = None,
    higher_is_better: bool = False,
) -> Callable[[Callable[[TokenSums], float | None]], Callable[[TokenSums], float | None]]:
    """Registers the decorated function as metric ``name`` (module docstring). Registering a name again
    with the same declaration does nothing; with another one it is an error."""

    def decorate(value: Callable[[TokenSums], float | None]) -> Callable[[TokenSums], float | None]:
        metric = Metric(name, label, subset, value, kind, lmeval_name or name, higher_is_better)
        check(metric)
        REGISTRY.setdefault(name, metric)
        return value

    return decorate


def check(metric: Metric) -> None:
    """A metric's declaration as every output can take it: a new name of its own, a known subset and
    kind, an lm-eval name no other metric has."""
    problem = None
    if not NAME.fullmatch(metric.name) or not NAME.fullmatch(metric.lmeval_name):
        problem = "its name and lm-eval name must be lower-case letters, digits and _, from a letter"
    elif metric.name in RESERVED:
        problem = f"{metric.name!r} names another field of a score line or of the leaderboard"
    elif metric.subset not in SUBSETS or metric.kind not in KINDS:
        problem = f"its subset is one of {', '.join(SUBSETS)} and its kind one of {', '.join(KINDS)}"
    elif REGISTRY.get(metric.name, metric) != metric:
        problem = f"{metric.name!r} is registered already, declared otherwise"
    elif any(m.lmeval_name == metric.lmeval_name and m.name != metric.name for m in REGISTRY.values()):
        problem = f"lm-eval name {metric.lmeval_name!r} belongs to another metric"
    if problem:
        raise PipelineError(f"metric {metric.name!r} cannot be registered: {problem}")


def metrics() -> tuple[Metric, ...]:
    """Every registered metric, in the order registered."""
    return tuple(REGISTRY.values())


def metric(name: str) -> Metric:
    """The registered metric ``name``."""
    if name not in REGISTRY:
        raise PipelineError(f"no metric {name!r}: the metrics are {', '.join(REGISTRY)}")
    return REGISTRY[name]


def perplexities() -> dict[str, str]:
    """The perplexities' names and labels (the correlations with benchmarks, the Trainer callback)."""
    return {m.name: m.label for m in REGISTRY.values() if m.kind == "perplexity"}


def perplexity(sums: TokenSums) -> float | None:
    """exp of the mean NLL over the subset's tokens (weighted by their soft weights in ``soft``)."""
    return sums.perplexity()


def bits_per_byte(sums: TokenSums) -> float | None:
    """The subset's NLL in bits over the UTF-8 bytes of its characters (``pipeline.score.bpb``)."""
    return sums.bits_per_byte()


def _register_score_metrics() -> None:
    """`make score`'s metrics, in the order its results show them."""
    for name, label, subset, value, kind, lmeval_name in (
        ("ppl", "PPL", "all", perplexity, "perplexity", None),
        ("longppl", "LongPPL", "key", perplexity, "perplexity", None),
        ("longppl_soft", "LongPPL-soft", "soft", perplexity, "perplexity", None),
        ("bpb", "bits/byte", "all", bits_per_byte, "bits", "bits_per_byte"),
        ("key_bpb", "key bits/byte", "key", bits_per_byte, "bits", "key_bits_per_byte"),
    ):
        register_metric(name, label=label, subset=subset, kind=kind, lmeval_name=lmeval_name)(value)


_register_score_metrics()
