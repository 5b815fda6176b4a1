"""One document through the evaluator: its long and short log-probs, key tokens and spans, as the
rows of the artifact's three tables (``pipeline.artifact.schema``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from pipeline import definition
from pipeline.artifact.schema import SPANS_SCHEMA, TOKENS_SCHEMA, table_from_columns
from pipeline.definition import KeyTokenDefinition
from pipeline.errors import PipelineError
from pipeline.keytokens.selection import Prepared
from pipeline.models.logprobs import TargetScorer, long_and_short_logprobs
from pipeline.models.precision import first_non_finite, non_finite_cause
from pipeline.provenance import text_sha256


def keytoken_tables(
    scorer: TargetScorer,
    item: Prepared,
    rule: KeyTokenDefinition,
    bos_id: int | None,
    progress: Callable[[Iterator], Iterator] | None = None,
) -> tuple[dict[str, Any], pa.Table, pa.Table]:
    """(documents row, tokens table, spans table) of one document (paper Eq. 2-4, 7, 8); ``bos_id``
    goes before the long pass (and every short window, when the definition says so)."""
    prefix = [bos_id] if bos_id is not None else []
    seq = torch.tensor(prefix + item.ids.tolist(), dtype=torch.long)
    window_bos = bos_id if rule.short_window_bos else None
    passes = long_and_short_logprobs(scorer, seq, rule.K, rule.d, bos_id=window_bos, progress=progress)
    long, short = passes.long[len(prefix) :], passes.short[len(prefix) :]
    check_finite(
        item, long, short, first_long=1 - len(prefix), first_short=rule.K - len(prefix), model=scorer.model
    )
    lsd = definition.long_short_difference(long, short)
    key = definition.is_key(lsd, long, rule.alpha, rule.beta)
    starts, ends = item.offsets[:, 0], item.offsets[:, 1]
    span_starts, span_ends, span_counts = definition.merge_spans(starts[key], ends[key])
    n, doc_id = len(item.ids), item.doc.id
    tokens = table_from_columns(
        TOKENS_SCHEMA,
        {
            "doc_id": [doc_id] * n,
            "token_index": np.arange(n, dtype=np.int32),
            "token_id": item.ids.astype(np.int64),
            "char_start": starts.astype(np.int32),
            "char_end": ends.astype(np.int32),
            "long_logprob": long,
            "short_logprob": short,
            "lsd": lsd,
            "soft_weight": definition.soft_weight(lsd, rule.gamma),
            "is_key": key,
        },
    )
    spans = table_from_columns(
        SPANS_SCHEMA,
        {
            "doc_id": [doc_id] * len(span_starts),
            "span_index": np.arange(len(span_starts), dtype=np.int32),
            "char_start": span_starts.astype(np.int32),
            "char_end": span_ends.astype(np.int32),
            "n_tokens": span_counts.astype(np.int32),
        },
    )
    return document_row(item, int(key.sum()), len(span_starts)), tokens, spans


def check_finite(
    item: Prepared, long: np.ndarray, short: np.ndarray, first_long: int, first_short: int, model: Any
) -> None:
    """Every long log-prob from ``first_long`` and every short one from ``first_short`` (text token
    indices; the others have no prediction or no short context) must be finite: a NaN or an
    infinity (overflow in a 16-bit dtype, or a damaged weight) is an error naming the document, the
    token and the cause (``non_finite_cause``)."""
    for name, values, first in (("long", long, max(first_long, 0)), ("short", short, max(first_short, 0))):
        at = first_non_finite(values[first:])
        if at is not None:
            i = first + at
            start, end = item.offsets[i]
            raise PipelineError(
                f"document '{item.doc.id}': the evaluator's {name}-context log-prob of token {i} (characters "
                f"{start}-{end}) is {values[i]}: {non_finite_cause(model, next(model.parameters()).dtype)}; "
                "the run stops before writing this document"
            )


def document_row(item: Prepared, n_key_tokens: int, n_spans: int) -> dict[str, Any]:
    """The document's row of ``documents.parquet``."""
    return {
        "doc_id": item.doc.id,
        "doc_index": item.index,
        "text": item.text,
        "sha256": text_sha256(item.text),
        "source_sha256": item.doc.sha256,
        "n_chars": len(item.text),
        "n_source_chars": len(item.doc.text),
        "n_tokens": len(item.ids),
        "truncated": item.truncated,
        "n_key_tokens": n_key_tokens,
        "n_spans": n_spans,
        "offsets_from": item.offsets_from,
    }
