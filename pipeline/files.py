"""Atomic file writes: a file appears complete or not at all, even when a run is killed mid-write."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file beside ``path``, flush it to disk, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, value: Any) -> None:
    """Indented JSON with sorted keys (stable bytes for the same value)."""
    write_bytes_atomic(
        path, (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
    )


def write_table_atomic(path: Path, table: pa.Table) -> None:
    """A Parquet file (zstd), written whole."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    write_bytes_atomic(path, sink.getvalue().to_pybytes())
