"""`make curate`'s pipeline: a corpus of Parquet or JSONL shards read by datatrove's readers, each row
scored by stage 1 (the same evaluator load, scorer and key-token definition as ``KeyTokenScorer``:
``keytoken_tables``) and given the per-document columns of ``pipeline.artifact.columns``, then written
back by datatrove's ``ParquetWriter`` with the input's other columns kept, one shard per task
(``train-<task>-of-<tasks>.parquet`` in its data folder, as Hub datasets name shards), without the
per-token tables.

How tasks split the corpus (``CorpusInput``): with at least as many files as tasks, as datatrove does
(each task its share of the files); with fewer (one big file), every task reads the files and keeps the
rows whose position is its rank modulo the tasks (round robin), so that tasks get the same number of
rows. A task's shard is written under a ``.partial`` name and renamed once the task is done
(``FinishShard``): a killed task leaves no shard that looks finished, and its rerun redoes its own
shard (a Parquet file cut mid-write has no footer to append to; a task is one shard of the corpus).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq
import torch
from datatrove.data import Document as Row
from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.readers import ParquetReader
from datatrove.pipeline.readers.base import BaseDiskReader
from datatrove.pipeline.writers import ParquetWriter

from pipeline.artifact.columns import COLUMNS, document_columns
from pipeline.artifact.schema import MANIFEST
from pipeline.errors import PipelineError
from pipeline.files import write_json_atomic, write_table_atomic
from pipeline.keytokens.executors import record_task_error
from pipeline.keytokens.selection import Prepared
from pipeline.keytokens.tables import keytoken_tables
from pipeline.models.loading import LoadedModel
from pipeline.models.logprobs import scorer_for
from pipeline.settings import Compute
from pipeline.text.corpus import Document
from pipeline.text.tokenization import encode_truncated

ENGINE = ".datatrove"  # datatrove's logging folder inside the output: completions, logs, stats, tasks
DATA = "data"
RECORD = "curate.json"  # the curation's record, written once every task is complete (pipeline.jobs.curate)
FLOAT_COLUMNS = [name for name in COLUMNS if name not in ("longppl_tokens", "longppl_scored_tokens")]
INT_COLUMNS = ["longppl_tokens", "longppl_scored_tokens", "longppl_key_tokens"]
# Rows the reader decodes and the writer buffers at a time (one output row group). At datatrove's default
# of 1,000, a task's peak memory grew with its documents until it held 1,000 on each side: 661 to 681 MB
# per task at 2,500 documents against 549 to 554 at 250; at 100, 559 to 564 against 536 to 554
# (docs/reports/scale.md). A task holds these rows and one row group of its input at a time.
BATCH_ROWS = 100
SUFFIXES = {"parquet": (".parquet",), "jsonl": (".jsonl", ".jsonl.gz", ".json")}


def shard_name(task: int, tasks: int) -> str:
    return f"train-{task:05d}-of-{tasks:05d}.parquet"


@dataclasses.dataclass(frozen=True)
class CorpusInput:
    """The corpus as the launcher found it (``inspect_corpus``): its folder, files, format and schema."""

    folder: Path
    files: list[str]  # relative to ``folder``
    format: str
    schema: pa.Schema
    text_key: str
    id_key: str

    def reader(self, by_rows: bool, batch_rows: int = BATCH_ROWS) -> PipelineStep:
        batch = {"batch_size": batch_rows} if self.format == "parquet" else {}  # JSONL: a line at a time
        reader = READERS[self.format](
            str(self.folder), text_key=self.text_key, id_key=self.id_key, paths_file=None,
            glob_pattern=None, recursive=False, adapter=readable_row, **batch,
        )  # fmt: skip
        return RowShard(reader, self.files) if by_rows else FileShard(reader, self.files)

    def output_schema(self) -> pa.Schema:
        fields = [f for f in self.schema if not f.name.startswith("longppl_")]
        ours = [pa.field(n, pa.int64() if n in INT_COLUMNS else pa.float64()) for n in COLUMNS]
        return pa.schema(fields + ours)


def readable_row(reader: Any, data: dict, path: str, row: int) -> dict:
    """datatrove's reading of a row (its default adapter), once its text is text: a row without it would be
    dropped by datatrove with one warning in a log, so it stops its task here, named by shard and row."""
    text = data.get(reader.text_key)
    if not isinstance(text, str) or not text.strip():
        what = "missing" if text is None else "empty" if isinstance(text, str) else f"a {type(text).__name__}"
        where = reader.data_folder.resolve_paths(path)
        raise unreadable(where, row, f"its {reader.text_key} is {what}, not text")
    return reader._default_adapter(data, path, row)


def unreadable(path: str, row: int, why: str) -> PipelineError:
    return PipelineError(
        f"{path}, row {row}: {why}; fix or drop that row, then run again with another output_dir (the "
        "input's files are part of the curation's identity); the other tasks go on"
    )


class CheckedJsonlReader(BaseDiskReader):
    """A JSONL reader on datatrove's file reader, where a line that is not a JSON object stops the task,
    named by file and line (datatrove's ``JsonlReader`` skips it with a warning in a log, and needs
    ``orjson``, which this package does not install: the standard library's ``json`` reads it here)."""

    name = "🐿 Jsonl (checked)"

    def __init__(self, data_folder: str, compression: str | None = "infer", **options: Any) -> None:
        super().__init__(data_folder, **options)
        self.compression = compression

    def read_file(self, filepath: str) -> DocumentsPipeline:
        where = self.data_folder.resolve_paths(filepath)
        with self.data_folder.open(filepath, "r", compression=self.compression) as lines:
            for i, line in enumerate(lines):
                try:
                    data = json.loads(line)
                except ValueError as exc:
                    raise unreadable(where, i, f"not JSON ({exc})") from None
                if not isinstance(data, dict):
                    raise unreadable(where, i, "not a JSON object")
                yield self.get_document_from_dict(data, filepath, i)


READERS = {"parquet": ParquetReader, "jsonl": CheckedJsonlReader}


def inspect_corpus(path: str, fmt: str | None, text_key: str, id_key: str) -> CorpusInput:
    """The corpus at ``path`` (a folder of shards, or one file), checked before any model loads: it
    has files of one format, and its first file the text column; its schema (the first file's)."""
    where = Path(path)
    if not where.exists():
        raise PipelineError(
            f"input.path={path}: no such file or folder; pass the folder of the corpus's shards"
        )
    if (where / MANIFEST).is_file():
        raise PipelineError(
            f"input.path={path} is a key-token artifact's folder, not a corpus: pass the folder of the "
            "corpus's shards (make curate writes the per-document columns of a corpus)"
        )
    folder, names = (where, sorted(p.name for p in where.iterdir() if p.is_file())) if where.is_dir() else (
        where.parent, [where.name])  # fmt: skip
    kinds = [fmt] if fmt else list(SUFFIXES)
    found = {kind: [n for n in names if n.endswith(SUFFIXES[kind])] for kind in kinds}
    kind = next((k for k in kinds if found[k]), None)
    if kind is None:
        shown = ", ".join(s for k in kinds for s in SUFFIXES[k])
        raise PipelineError(
            f"input.path={path}: no corpus shards there (files ending {shown}); pass the folder that "
            "holds them, or input.format=parquet|jsonl"
        )
    files = found[kind]
    schema = first_schema(folder / files[0], kind)
    if kind == "parquet":  # every shard's columns, from its footer: a shard of another table stops here
        for name in files[1:]:
            if (other := first_schema(folder / name, kind)).names != schema.names:
                raise PipelineError(
                    f"input.path={path}: {name} has the columns {', '.join(other.names)}, not those of "
                    f"{files[0]} ({', '.join(schema.names)}): pass a folder of one table's shards"
                )
    if text_key not in schema.names:
        raise PipelineError(
            f"input.text_key={text_key}: {folder / files[0]} has no such column (its columns: "
            f"{', '.join(schema.names)}); pass input.text_key=<the text column>"
        )
    ours = [n for n in schema.names if n in COLUMNS]
    if ours:
        raise PipelineError(
            f"{folder / files[0]} already has the column {ours[0]}: it is a curated output; curate the "
            "original corpus, or select from this one (make curate-select)"
        )
    return CorpusInput(folder, files, kind, schema, text_key, id_key)


def first_schema(file: Path, kind: str) -> pa.Schema:
    try:
        if kind == "parquet":
            return pq.read_schema(file)
        with open(file, "rb") as handle:
            head = b"".join(line for _, line in zip(range(1000), handle, strict=False))
        return pa_json.read_json(io.BytesIO(head)).schema
    except (OSError, pa.ArrowException) as exc:
        raise PipelineError(
            f"{file} does not read as {kind} ({exc}); pass input.format= or fix the file"
        ) from None


class FileShard(PipelineStep):
    """datatrove's reader, each task its share of the files (as datatrove shards them)."""

    name = "files of this task"

    def __init__(self, reader: PipelineStep, files: list[str]) -> None:
        super().__init__()
        self.reader, self.files = reader, files

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        yield from self.reader.read_files_shard(self.files[rank::world_size])


class RowShard(FileShard):
    """datatrove's reader over every file, each task the rows at its rank modulo the tasks."""

    name = "rows of this task"

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        for i, row in enumerate(self.reader.read_files_shard(self.files)):
            if i % world_size == rank:
                yield row


class CurationScorer(PipelineStep):
    """Each row scored by stage 1 and given the ``longppl_*`` columns (module docstring); the
    evaluator loads once per task, at its first row, on the task's GPUs."""

    name = "LongPPL per-document columns"
    type = "🔑 - SCORER"

    def __init__(self, settings: Any, gpus: int) -> None:
        super().__init__()
        self.settings, self.gpus, self.worker = settings, gpus, 0

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        """The rows scored; a failure (a row that cannot be read included) is left in
        ``errors/<task>.json`` for the launcher, and raised."""
        try:
            yield from self.score(data, rank)
        except Exception as exc:
            record_task_error(self.settings.folder / ENGINE, rank, exc)
            raise

    def score(self, data: DocumentsPipeline, rank: int) -> DocumentsPipeline:
        started, rows, tokens = time.time(), 0, 0
        lm = None
        for row in data or ():
            if lm is None:
                running = {"pid": os.getpid(), "since": round(started, 3)}
                write_json_atomic(self.settings.folder / ENGINE / "running" / f"{rank:05d}.json", running)
                lm, compute = self.evaluator()
                scorer = scorer_for(lm, compute)
                scorer.check_against_full_forward()
                bos_id = lm.bos_token_id if self.settings.add_bos else None
            with self.track_time():
                row.metadata |= self.columns(row, lm, scorer, bos_id)
            rows, tokens = rows + 1, tokens + row.metadata["longppl_tokens"]
            self.stat_update("documents")
            yield row
        record = {
            "rows": rows,
            "tokens": tokens,
            "seconds": round(time.time() - started, 3),
            "pid": os.getpid(),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
        if lm is not None:
            record |= {"evaluator": lm.source.to_dict(), "placement": lm.placement}
        write_json_atomic(self.settings.folder / ENGINE / "tasks" / f"{rank:05d}.json", record)

    def columns(self, row: Row, lm: LoadedModel, scorer: Any, bos_id: int | None) -> dict[str, Any]:
        """One row's columns from its tables (``keytoken_tables``, as stage 1 makes them)."""
        text, enc, truncated = encode_truncated(lm.tokenizer, row.text, self.settings.max_tokens)
        if len(enc.ids) == 0:
            return document_columns([], [], self.settings.definition)
        item = Prepared(
            0, Document(str(row.id), row.text), text, enc.ids, enc.offsets, enc.offsets_from, truncated
        )
        tokens = keytoken_tables(scorer, item, self.settings.definition, bos_id)[1]
        long, short = (
            tokens.column(n).to_numpy(zero_copy_only=False) for n in ("long_logprob", "short_logprob")
        )
        return document_columns(long, short, self.settings.definition)

    def evaluator(self) -> tuple[LoadedModel, Compute]:
        """The evaluator on this task's GPUs (the local executor: its worker's share)."""
        compute = self.settings.compute
        if not self.gpus or ":" in compute.device:
            return self.settings.evaluator.load(compute), compute
        first = self.worker * self.gpus if self.settings.engine.executor == "local" else 0
        gpus = list(range(first, first + self.gpus))
        if not self.settings.evaluator.device_map:
            compute = dataclasses.replace(compute, device=f"cuda:{gpus[0]}")
            torch.cuda.set_device(gpus[0])
        return self.settings.evaluator.load(compute, gpus=gpus), compute


def shard_writer(corpus: CorpusInput, out: Path, tasks: int, batch_rows: int = BATCH_ROWS) -> ParquetWriter:
    """datatrove's ParquetWriter of a task's rows: the input's columns (its text and id under their own
    names) and the ``longppl_*`` ones, under the shard's ``.partial`` name."""

    def adapter(_writer: Any, row: Row) -> dict[str, Any]:
        meta = {k: v for k, v in row.metadata.items() if k != "file_path"}
        return {corpus.text_key: row.text, corpus.id_key: row.id, **meta}

    name = shard_name(0, tasks).replace("00000-of", "${rank}-of") + ".partial"
    return ParquetWriter(
        str(out / DATA), output_filename=name, adapter=adapter, schema=corpus.output_schema(),
        max_file_size=-1, use_content_defined_chunking=False, batch_size=batch_rows,
    )  # fmt: skip


class FinishShard(PipelineStep):
    """The task's shard, once its writer closed it, renamed from ``.partial`` to its name (a task with no
    row: an empty shard of the same columns)."""

    name = "shard finished"

    def __init__(self, out: Path, tasks: int, schema: pa.Schema) -> None:
        super().__init__()
        self.out, self.tasks, self.schema = out, tasks, schema

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> Iterator[Row]:
        for _ in data or ():
            pass
        final = self.out / DATA / shard_name(rank, self.tasks)
        partial = final.with_name(final.name + ".partial")
        if partial.exists():
            os.replace(partial, final)
        else:
            write_table_atomic(final, self.schema.empty_table())
        yield from ()
