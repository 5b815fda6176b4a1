"""`make import-official`'s summary: the documents and key spans imported, the share of spans on the
evaluator's token boundaries, and where the ``key_spans`` artifact is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.artifact.schema import KEY_SPANS


def import_summary(root: Path, report: Any, n_spans: int, n_docs: int) -> str:
    """The lines for an import (``report``: a ``pipeline.official.boundaries.BoundaryReport``)."""
    return "\n".join(
        [
            f"documents   {n_docs}",
            f"key spans   {n_spans}",
            f"boundaries  {100 * report.share:.2f}% of spans start and end on {report.tokenizer} token "
            f"boundaries (threshold {100 * report.threshold:g}%)",
            f"output      {root} (kind {KEY_SPANS}: PPL and LongPPL; no per-token LSD)",
        ]
    )
