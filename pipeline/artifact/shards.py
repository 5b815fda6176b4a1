"""The files that hold an artifact's tables: one ``<table>.parquet`` per table (the default), or shards.

A sharded artifact (``shard_rows``: at most that many rows of any table in one file) names its files as
Hub datasets name theirs (``datasets``' ``push_to_hub``: ``{split}-{index:05d}-of-{count:05d}.parquet``),
the table in place of the split: ``tokens-00000-of-00004.parquet``. Every table is cut at the same
document boundaries, so shard ``i`` of each table holds the same whole documents: a document's rows
never straddle two files, and shard ``i`` of every table is a self-contained piece of the artifact (a
worker or a streaming reader that takes one shard has each of its documents' text, tokens and spans
whole, and a shard's rows can be checked against the documents it must hold). A document with more rows
than ``shard_rows`` has a shard of its own.

The manifest's ``files`` lists every shard with its sha256, bytes and rows, and ``sharding`` records the
cut (``shard_rows``, the number of shards, the documents in each). The layout changes no value: the
tables read back whole are those of the one-file form, so the fingerprint, the discrete hash and the
contents hash are the same (``pipeline.artifact.identity``). Reading refuses a shard the manifest lists
and the folder lacks, a ``*.parquet`` file the manifest does not list, and a shard whose rows belong to
other documents, each naming the file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic.dataclasses import dataclass

from pipeline.definition import Positive
from pipeline.errors import PipelineError

SHARDING = "sharding"  # the manifest's record of the cut; absent: one file per table
MAX_SHARDS = 99_999  # what five digits number (`-of-99999`), the names Hub datasets read
TABLE_FIX = "download or copy the artifact again, or regenerate it with `make keytokens`"


@dataclass(frozen=True)
class Sharding:
    """How stage 1 and ``save_key_tokens`` lay out the tables: None, one file per table (the default);
    a number, shards of at most that many rows of any table, cut at document boundaries."""

    shard_rows: Positive | None = None


def shard_name(table: str, index: int, count: int) -> str:
    """A shard's file name, as ``datasets`` names a split's shards: ``tokens-00001-of-00004.parquet``."""
    return f"{table}-{index:05d}-of-{count:05d}.parquet"


def shard_pattern(table: str, count: int) -> str:
    """The glob of a table's shards, as a dataset card's ``data_files`` gives it."""
    return f"{table}-*-of-{count:05d}.parquet"


def shard_count(manifest: dict[str, Any]) -> int | None:
    """The number of shards per table; None for one file per table."""
    record = manifest.get(SHARDING)
    return record["shards"] if isinstance(record, dict) else None


def table_files(manifest: dict[str, Any], table: str) -> list[str]:
    """The files that hold a table, in order."""
    count = shard_count(manifest)
    return [f"{table}.parquet"] if count is None else [shard_name(table, i, count) for i in range(count)]


def artifact_files(manifest: dict[str, Any], tables: tuple[str, ...]) -> list[str]:
    """Every file of the tables ``tables``, table by table."""
    return [name for table in tables for name in table_files(manifest, table)]


def recorded_rows(manifest: dict[str, Any], table: str) -> int | None:
    """A table's rows as the manifest records them (summed over its shards); None where it records none."""
    rows = [(manifest["files"].get(name) or {}).get("rows") for name in table_files(manifest, table)]
    valid = all(isinstance(n, int) and not isinstance(n, bool) for n in rows)
    return sum(rows) if valid else None


def describe(manifest: dict[str, Any]) -> str:
    """The layout in words: ``one file per table`` or ``4 shards per table (at most 1000 rows each)``."""
    record = manifest.get(SHARDING)
    if not isinstance(record, dict):
        return "one file per table"
    return f"{record['shards']} shards per table (at most {record['shard_rows']} rows each)"


def locate_row(manifest: dict[str, Any], table: str, row: int) -> tuple[str, int]:
    """The file that holds row ``row`` of a table read whole, and the row's number in that file."""
    names = table_files(manifest, table)
    if len(names) == 1:
        return names[0], row
    rows = [int((manifest["files"].get(name) or {}).get("rows") or 0) for name in names]
    ends = np.cumsum(rows)
    shard = min(int(np.searchsorted(ends, row, side="right")), len(names) - 1)
    return names[shard], row - int(ends[shard] - rows[shard])


# ----------------------------------------------------------------------------------------------
# Writing: the cut


def layout(tables: dict[str, pa.Table], shard_rows: int | None) -> tuple[dict[str, pa.Table], dict | None]:
    """The files to write (name -> rows) and the manifest's ``sharding`` record (None: one file per
    table). ``tables``: every table of the artifact, ``documents`` first, each grouped by document in
    document order; cut at the same document boundaries, at most ``shard_rows`` rows of any table per
    shard unless one document alone has more."""
    if shard_rows is None:
        return {f"{name}.parquet": table for name, table in tables.items()}, None
    doc_ids = tables["documents"]["doc_id"]
    counts = {name: rows_per_document(name, table, doc_ids) for name, table in tables.items()}
    sizes = cut(np.stack(list(counts.values())), shard_rows)
    if len(sizes) > MAX_SHARDS:
        raise PipelineError(
            f"shard_rows={shard_rows} cuts the tables into {len(sizes)} shards, more than the {MAX_SHARDS} "
            "that shard names number (`-of-99999`): raise shard_rows (the finished documents are kept)"
        )
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    files = {}
    for name, table in tables.items():
        starts = np.concatenate([[0], np.cumsum(counts[name])])[bounds]
        for i in range(len(sizes)):
            piece = table.slice(int(starts[i]), int(starts[i + 1] - starts[i]))
            files[shard_name(name, i, len(sizes))] = piece
    return files, {"shard_rows": shard_rows, "shards": len(sizes), "documents": sizes}


def rows_per_document(name: str, table: pa.Table, doc_ids: pa.ChunkedArray) -> np.ndarray:
    """How many rows of ``table`` each document has; a ValueError when its rows are not grouped by
    document in document order (then no cut keeps documents whole)."""
    index = pc.index_in(table["doc_id"], value_set=doc_ids.combine_chunks())
    if index.null_count:
        raise ValueError(f"the {name} table has rows of a document that the documents table does not list")
    index = np.asarray(index.to_numpy(zero_copy_only=False), dtype=np.int64)
    if (np.diff(index) < 0).any():
        raise ValueError(f"the {name} table's rows are not grouped by document in document order")
    return np.bincount(index, minlength=len(doc_ids))


def cut(counts: np.ndarray, shard_rows: int) -> list[int]:
    """Documents per shard: whole documents, in order, while no table passes ``shard_rows`` rows
    (``counts``: tables x documents); at least one shard."""
    sizes: list[int] = []
    held, n = np.zeros(counts.shape[0], dtype=np.int64), 0
    for column in counts.T:
        if n and (held + column > shard_rows).any():
            sizes.append(n)
            held[:], n = 0, 0
        held += column
        n += 1
    return [*sizes, n] if n or not sizes else sizes


def stale_files(root: Path, keep: list[str]) -> list[Path]:
    """The ``*.parquet`` files in ``root`` other than ``keep``."""
    return sorted(p for p in root.glob("*.parquet") if p.name not in keep)


def check_no_other_tables(root: Path, tables: tuple[str, ...]) -> None:
    """Before writing an artifact into ``root``: no ``*.parquet`` file there but the tables' own names in
    either layout (those of an earlier artifact, which the new one replaces); another would stay beside
    the artifact, which would then not load."""
    own = re.compile(rf"({'|'.join(map(re.escape, tables))})(-\d{{5}}-of-\d{{5}})?\.parquet")
    if others := [p for p in stale_files(root, []) if not own.fullmatch(p.name)]:
        raise PipelineError(
            f"{root} holds {others[0].name}, which is no table of a key-token artifact: write the "
            "artifact into another folder, or move that file away"
        )


# ----------------------------------------------------------------------------------------------
# Reading: the layout checked


def check_layout(manifest: dict[str, Any], tables: tuple[str, ...], where: str | Path) -> None:
    """The manifest's ``sharding`` record of its type, and its ``files`` exactly the files of its layout
    (the documents' shards holding the documents it records): a PipelineError naming the first file
    that is not."""
    record = manifest.get(SHARDING)
    if record is not None:
        fields = record if isinstance(record, dict) else {}
        count, sizes = fields.get("shards"), fields.get("documents")
        valid = (
            _count(count, 1)
            and _count(fields.get("shard_rows"), 1)
            and count <= MAX_SHARDS
            and isinstance(sizes, list)
            and len(sizes) == count
            and all(_count(n, 0) for n in sizes)
        )
        if not valid:
            raise PipelineError(
                f"artifact {where}: the manifest's {SHARDING} record is not a cut of its documents; "
                + TABLE_FIX
            )
    files = manifest["files"]
    if not isinstance(files, dict):
        raise PipelineError(f"artifact {where}: the manifest's files is not a mapping; {TABLE_FIX}")
    expected = artifact_files(manifest, tables)
    if unknown := [name for name in files if name not in expected]:
        raise PipelineError(
            f"artifact {where}: its manifest lists {unknown[0]}, which is no file of its layout "
            f"({describe(manifest)}: {', '.join(expected[:2])}, ...); {TABLE_FIX}"
        )
    if record is not None:
        for name, size in zip(table_files(manifest, "documents"), record["documents"], strict=True):
            if (files.get(name) or {}).get("rows") != size:
                raise PipelineError(
                    f"artifact {where}: {name} holds {size} documents by the manifest's {SHARDING} record, "
                    f"{(files.get(name) or {}).get('rows')} by its files; {TABLE_FIX}"
                )


def _count(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def check_folder(root: Path, manifest: dict[str, Any]) -> None:
    """No ``*.parquet`` file in the artifact's folder that its manifest does not list (a shard of
    another artifact or layout would be read by ``datasets.load_dataset`` and by globs, not by this
    pipeline)."""
    if extra := stale_files(root, list(manifest["files"])):
        raise PipelineError(
            f"artifact {root} holds {extra[0].name}, which its manifest does not list (a file of another "
            f"artifact or layout; this one is {describe(manifest)}): remove it, or {TABLE_FIX}"
        )


def check_documents_of_shards(root: Path, manifest: dict[str, Any], tables: dict[str, pa.Table]) -> None:
    """Each shard's rows belong to the documents its documents shard holds (``tables``: read whole,
    shard after shard); a PipelineError naming the first shard that holds another document's rows."""
    record = manifest.get(SHARDING)
    if record is None:
        return
    doc_ids = tables["documents"]["doc_id"].combine_chunks()
    ends = np.cumsum(record["documents"])
    for name, table in tables.items():
        index = pc.index_in(table["doc_id"], value_set=doc_ids).fill_null(-1)
        index = np.asarray(index.to_numpy(zero_copy_only=False), dtype=np.int64)
        names = table_files(manifest, name)
        rows = [manifest["files"][file]["rows"] for file in names]
        held = np.repeat(np.arange(len(names)), rows)
        belongs = np.searchsorted(ends, index, side="right")
        bad = np.flatnonzero((index < 0) | (belongs != held))
        if bad.size:
            row = int(bad[0])
            doc, home = table["doc_id"][row].as_py(), int(belongs[row])
            whose = (
                "which the artifact's documents table does not list"
                if index[row] < 0
                else f"which belongs in {table_files(manifest, 'documents')[home]} and its shards"
            )
            raise PipelineError(
                f"artifact {root}: {names[held[row]]} holds rows of document {doc!r}, {whose}: a shard "
                f"of another artifact or of another cut; {TABLE_FIX}"
            )
