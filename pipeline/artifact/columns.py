"""The per-document columns of stage 1 (``longppl_*``): what `make curate` writes beside each corpus row,
and what `make keytokens`'s summary shows per document. One function (``document_columns``) computes them
from one document's per-token values as stage 1 computes them (the long- and short-context log-probs;
LSD, key tokens and soft weights by ``pipeline.definition``). A token is *scored* when it has both a
long- and a short-context log-prob (its LSD is finite: every token from the K-th on). A value that no
token defines (a document of at most K tokens) is None (null in Parquet). ``artifact_columns`` and
``table_columns`` give the same columns from an artifact's tokens table (its stored long- and
short-context log-probs, its own alpha, beta and gamma), for the summary and the key-token pages."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from pipeline import definition
from pipeline.artifact.reader import iter_documents
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.definition import KeyTokenDefinition

PREFIX = "longppl_"
# Each column and what it holds (docs/scale.md#the-columns shows the same list).
COLUMNS = {
    "longppl_tokens": "the document's evaluator tokens (after max_tokens)",
    "longppl_scored_tokens": "tokens with a short context (finite LSD): every token from the K-th on",
    "longppl_key_tokens": "key tokens: LSD > alpha and long-context log-prob > beta",
    "longppl_key_ratio": "key tokens / scored tokens",
    "longppl_lsd_p50": "median LSD of the scored tokens (nats)",
    "longppl_lsd_p90": "90th percentile of their LSD",
    "longppl_lsd_p99": "99th percentile of their LSD",
    "longppl_mean_positive_lsd": "mean of max(LSD, 0) over the scored tokens: the long context's benefit",
    "longppl_mean_positive_lsd_first": "the same over the first third of the scored tokens (by position)",
    "longppl_mean_positive_lsd_middle": "the same over their middle third",
    "longppl_mean_positive_lsd_last": "the same over their last third",
    "longppl_soft_mass": "LongPPL-soft's weight mass: the sum of min(exp(LSD), gamma) over the scored tokens",
    "longppl_ppl": "the evaluator's perplexity: exp(-mean long-context log-prob) over every predicted token",
}
THIRDS = ("first", "middle", "last")


class ArtifactRule(NamedTuple):
    """What the columns take of the key-token definition an artifact records in its settings (values
    read from its manifest, not a run's settings)."""

    alpha: float
    beta: float
    gamma: float


def document_columns(
    long: np.ndarray, short: np.ndarray, rule: KeyTokenDefinition | ArtifactRule
) -> dict[str, Any]:
    """The columns of ``COLUMNS`` for one document's long- and short-context log-probs (NaN where a
    token has none), by the key-token definition ``rule`` (its alpha, beta, gamma)."""
    long, short = np.asarray(long, dtype=np.float64), np.asarray(short, dtype=np.float64)
    lsd = definition.long_short_difference(long, short)
    scored = np.isfinite(lsd)
    key = definition.is_key(lsd, long, rule.alpha, rule.beta)
    values = lsd[scored]
    positive = np.maximum(values, 0.0)
    p50, p90, p99 = np.percentile(values, [50, 90, 99]) if values.size else (None, None, None)
    predicted = long[np.isfinite(long)]
    row: dict[str, Any] = {
        "longppl_tokens": len(long),
        "longppl_scored_tokens": int(scored.sum()),
        "longppl_key_tokens": int(key.sum()),
        "longppl_key_ratio": float(key.sum() / values.size) if values.size else None,
        "longppl_lsd_p50": none_or_float(p50),
        "longppl_lsd_p90": none_or_float(p90),
        "longppl_lsd_p99": none_or_float(p99),
        "longppl_mean_positive_lsd": float(positive.mean()) if values.size else None,
    }
    for name, part in zip(THIRDS, np.array_split(positive, 3), strict=True):
        row[f"longppl_mean_positive_lsd_{name}"] = float(part.mean()) if part.size else None
    row["longppl_soft_mass"] = float(definition.soft_weight(values, rule.gamma).sum())
    row["longppl_ppl"] = math.exp(-float(predicted.mean())) if predicted.size else None
    return row


def none_or_float(value: Any) -> float | None:
    return None if value is None else float(value)


def artifact_rule(settings: dict[str, Any]) -> ArtifactRule:
    """An artifact's recorded alpha, beta and gamma."""
    return ArtifactRule(float(settings["alpha"]), float(settings["beta"]), float(settings["gamma"]))


def artifact_columns(artifact: KeyTokenArtifact) -> dict[str, dict[str, Any]]:
    """The columns of every document of a per-token artifact, by document id (in its order)."""
    rule = artifact_rule(artifact.settings)
    return {doc.doc_id: document_columns(doc.long, doc.short, rule) for doc in iter_documents(artifact)}


def table_columns(tokens: pa.Table, settings: dict[str, Any]) -> dict[str, Any]:
    """The columns of one document from its rows of an artifact's tokens table and the artifact's
    settings."""
    long, short = (
        np.asarray(tokens[name].to_numpy(zero_copy_only=False), dtype=np.float64)
        for name in ("long_logprob", "short_logprob")
    )
    return document_columns(long, short, artifact_rule(settings))
