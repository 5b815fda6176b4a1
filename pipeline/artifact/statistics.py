"""What an artifact holds, counted: documents (truncated ones), tokens (those with a short context),
key tokens and the distribution of LSD (its median and upper quantiles), and each document's columns
(``pipeline.artifact.columns``), as `make keytokens` reports them."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.artifact.columns import artifact_columns
from pipeline.artifact.schema import KeyTokenArtifact

QUANTILES = (0.5, 0.9, 0.99, 0.999)


def statistics(artifact: KeyTokenArtifact) -> dict[str, Any]:
    """The counts and LSD quantiles of a per-token artifact (LSD is NaN without a short context), and
    its documents' columns by document id."""
    lsd = np.asarray(artifact.tokens["lsd"].to_numpy(zero_copy_only=False), dtype=np.float64)
    lsd = lsd[~np.isnan(lsd)]
    q = np.quantile(lsd, QUANTILES) if len(lsd) else [float("nan")] * len(QUANTILES)
    return {
        "documents": artifact.documents.num_rows,
        "truncated": sum(artifact.documents["truncated"].to_pylist()),
        "tokens": artifact.tokens.num_rows,
        "with_short_context": len(lsd),
        "key_tokens": int(np.asarray(artifact.tokens["is_key"]).sum()),
        "lsd_quantiles": dict(zip(QUANTILES, (float(v) for v in q), strict=True)),
        "lsd": lsd,
        "columns": artifact_columns(artifact),
    }
