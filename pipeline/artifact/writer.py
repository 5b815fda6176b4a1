"""Writing a key-token artifact document by document, crash-safe and resumable.

Each finished document is a part, ``parts/<index>/`` (its three tables, written to a temporary
directory and renamed into place: a part is complete or absent); ``run.json`` holds the settings
fingerprint that a resumed run must match. ``finalize`` concatenates the parts in document order
into the tables of ``pipeline.artifact.schema`` and writes the manifest last. ``write_artifact`` writes an
artifact whose tables are already whole (an imported one, or one computed in memory). ``FOLDER`` is
where a run may write one (``pipeline.outputs``): a new or empty folder, or an artifact's (finished, or
a run's with its ``run.json`` or ``parts/``), never a folder of other files.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline import files
from pipeline.artifact import shards
from pipeline.artifact.reader import read_parquet
from pipeline.artifact.schema import (
    ALL_TABLES,
    DOCUMENTS_SCHEMA,
    ENGINE,
    KINDS,
    MANIFEST,
    PARTS,
    PER_TOKEN,
    QA_TABLES,
    RUN_STATE,
    SPANS_SCHEMA,
    TABLES,
    TOKENS_SCHEMA,
    KeyTokenArtifact,
    new_manifest,
)
from pipeline.errors import PipelineError
from pipeline.files import write_json_atomic, write_json_new, write_table_atomic
from pipeline.outputs import FolderKind, Output, check
from pipeline.provenance import file_sha256


def foreign_folder(folder: Path) -> str | None:
    """Why ``folder`` is no artifact's folder: it holds files, but no manifest, run record, parts or the
    engine's folder of a run under way."""
    names = sorted(p.name for p in folder.iterdir())
    if not names or {MANIFEST, RUN_STATE, PARTS, ENGINE} & set(names):
        return None
    return f"a folder that holds no artifact ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"


FOLDER = FolderKind("artifacts' folders (new, empty, or an artifact's)", "`make keytokens`", foreign_folder,
                    is_artifact=True)  # fmt: skip


def check_output(root: Path, setting: str = "output_dir") -> None:
    """Where an artifact is to be written, checked before any work (``pipeline.outputs``): a new or empty
    folder, or an artifact's, in no artifact's or model's folder, on a disk this process can write."""
    check(Output(setting, root, FOLDER))


class ArtifactWriter:
    """Writes one artifact document by document; resumes an interrupted run with the same settings."""

    def __init__(self, root: Path, settings: dict[str, Any], fingerprint: str):
        self.root = Path(root)
        self.settings = settings
        self.fingerprint = fingerprint

    @property
    def parts(self) -> Path:
        return self.root / PARTS

    def is_complete(self) -> bool:
        """True when a finished artifact with these settings is already here; a DamagedRecord when a
        manifest is here that does not read (the run then computes the artifact anew)."""
        recorded = read_record(self.root / MANIFEST)
        if recorded is None:
            return False
        self._check_same(recorded.get("fingerprint"), recorded.get("settings"))
        return True

    def start(self) -> None:
        """Record the settings in ``run.json``, or check that a resumed run has the recorded ones. Tasks
        that start together record them once (the first to write ``run.json`` wins; the others check
        theirs against it). With no ``run.json``, a manifest here (an artifact computed anew) must
        hold these settings too. A damaged ``run.json`` is written anew when no document is finished;
        otherwise the finished ones cannot be matched to settings, and the error says so."""
        state = self.root / RUN_STATE
        recorded = self.recorded_state()
        with self.writing("run.json"):
            self.parts.mkdir(parents=True, exist_ok=True)
            if recorded is None:
                with contextlib.suppress(DamagedRecord):
                    if (finished := read_record(self.root / MANIFEST)) is not None:
                        self._check_same(finished.get("fingerprint"), finished.get("settings"))
                record = {"fingerprint": self.fingerprint, "settings": self.settings}
                if state.is_file():  # damaged, and no document is finished
                    write_json_atomic(state, record)
                elif not write_json_new(state, record):
                    recorded = self.recorded_state()  # another task wrote it first
        if recorded is not None:
            self._check_same(recorded.get("fingerprint"), recorded.get("settings"))

    def recorded_state(self) -> dict[str, Any] | None:
        """``run.json``'s record (None: none, or a damaged one while no document is finished)."""
        try:
            return read_record(self.root / RUN_STATE)
        except DamagedRecord as exc:
            if self.finished():
                raise PipelineError(
                    f"{exc}: the {len(self.finished())} finished documents in {self.parts} cannot be matched "
                    "to settings; delete that directory to start over, or pass name=<new name>"
                ) from None
            return None

    @classmethod
    def resumed(cls, root: Path) -> ArtifactWriter:
        """The writer of the run recorded in ``root``'s ``run.json`` (its settings, from the tasks that
        ran): what ``finalize`` needs once every document is finished."""
        writer = cls(root, {}, "")
        recorded = writer.recorded_state()
        if recorded is None:
            raise PipelineError(
                f"{root} holds no run.json, so no task has recorded its settings: run it again"
            )
        writer.settings, writer.fingerprint = recorded.get("settings"), recorded.get("fingerprint")
        return writer

    @contextlib.contextmanager
    def writing(self, what: str) -> Iterator[None]:
        """A failed write (a full disk, no permission) as one PipelineError: what was being written,
        why, and that finished documents are kept (a rerun resumes)."""
        try:
            yield
        except OSError as exc:
            full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
            raise PipelineError(
                f"could not write {what} of {self.root} ({exc.strerror or exc}): "
                + ("free some space, then " if full else "fix that, then ")
                + f"run `make keytokens` again: the {len(self.finished())} finished documents are kept "
                "and the run resumes"
            ) from None

    def _check_same(self, fingerprint: str | None, recorded: Any) -> None:
        if fingerprint == self.fingerprint:
            return
        recorded = recorded if isinstance(recorded, dict) else {}
        changed = sorted(
            k for k in set(recorded) | set(self.settings) if recorded.get(k) != self.settings.get(k)
        )
        detail = "; ".join(f"{k}: {recorded.get(k)!r} -> {self.settings.get(k)!r}" for k in changed[:4])
        raise OtherSettings(
            f"{self.root} holds a run with other settings ({detail or 'fingerprint differs'}): "
            "pass name=<new name> to keep both, or delete that directory to start over"
        )

    def discard_if_empty(self) -> None:
        """After a failed run: if no document was finished, remove what ``start`` made (``run.json``,
        ``parts/``, then the directory if that leaves it empty), so that nothing trips a rerun."""
        if self.finished() or (self.root / MANIFEST).exists():
            return
        shutil.rmtree(self.parts, ignore_errors=True)
        (self.root / RUN_STATE).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.root.rmdir()  # only when empty

    def finished(self) -> set[int]:
        """Indices of documents whose part is complete."""
        if not self.parts.is_dir():
            return set()
        return {int(p.name) for p in self.parts.iterdir() if p.is_dir() and p.name.isdigit()}

    def write_part(self, index: int, document: dict[str, Any], tokens: pa.Table, spans: pa.Table) -> None:
        """Write one document's rows; the part appears whole or not at all."""
        with self.writing(f"document {document['doc_id']!r}"):
            staging = Path(tempfile.mkdtemp(dir=self.parts, prefix=".tmp-"))
            try:
                write_table_atomic(
                    staging / "documents.parquet", pa.Table.from_pylist([document], DOCUMENTS_SCHEMA)
                )
                write_table_atomic(staging / "tokens.parquet", tokens.cast(TOKENS_SCHEMA))
                write_table_atomic(staging / "spans.parquet", spans.cast(SPANS_SCHEMA))
                os.chmod(staging, 0o777 & ~files.umask())  # mkdtemp makes it private
                os.replace(staging, self.parts / f"{index:06d}")
            except OSError as exc:
                shutil.rmtree(staging, ignore_errors=True)
                if (
                    exc.errno not in (errno.ENOTEMPTY, errno.EEXIST)
                    or not (self.parts / f"{index:06d}").is_dir()
                ):
                    raise  # else a task run twice at once (a Slurm job resubmitted) wrote it first
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise

    def finalize(
        self,
        indices: Iterable[int],
        manifest_extra: dict[str, Any],
        qa: dict[str, pa.Table] | None = None,
        shard_rows: int | None = None,
    ) -> dict[str, Any]:
        """Concatenate the parts in document order, write the tables (and the question tables ``qa``,
        whose record ``manifest_extra`` holds; in shards of at most ``shard_rows`` rows when it is set:
        ``write_artifact``), then the manifest, last."""
        indices = sorted(indices)
        tables = {}
        for name, schema in TABLES.items():
            pieces = [self.read_part(i, name) for i in indices]
            tables[name] = pa.concat_tables(pieces) if pieces else schema.empty_table()
        manifest = new_manifest(PER_TOKEN, self.fingerprint, self.settings, manifest_extra)
        with self.writing("the tables and the manifest"):
            artifact = KeyTokenArtifact(self.root, manifest, **tables, qa=qa)
            manifest = write_artifact(self.root, artifact, shard_rows)
        shutil.rmtree(self.parts, ignore_errors=True)
        (self.root / RUN_STATE).unlink(missing_ok=True)
        return manifest

    def read_part(self, index: int, name: str) -> pa.Table:
        """One table of a finished document, read and checked like an artifact's."""
        part = self.parts / f"{index:06d}"
        fix = f"delete {part} and run `make keytokens` again to compute that document anew"
        return read_parquet(part / f"{name}.parquet", TABLES[name], fix)


class OtherSettings(PipelineError):
    """The output directory holds a run with other settings."""


class DamagedRecord(PipelineError):
    """A manifest or run.json that is not a JSON object (cut off, edited, a disk error)."""


def read_record(path: Path) -> dict[str, Any] | None:
    """The JSON object a writer left at ``path`` (manifest or ``run.json``); None if there is none."""
    if not path.is_file():
        return None
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise DamagedRecord(f"{path} does not read ({str(exc).splitlines()[0][:80]})") from None
    if not isinstance(recorded, dict):
        raise DamagedRecord(f"{path} does not read (not a JSON object)")
    return recorded


def write_artifact(root: Path, artifact: KeyTokenArtifact, shard_rows: int | None = None) -> dict[str, Any]:
    """Write an artifact's tables (those its kind declares, and its question tables when it has them),
    then its manifest with every file's sha256, size and rows, last; returns the manifest written.
    ``shard_rows``: None, one ``<table>.parquet`` per table; a number, each table in shards of at most
    that many rows, cut at document boundaries (``pipeline.artifact.shards``), recorded in the manifest's
    ``sharding``. Table files of an earlier layout in ``root`` are removed before the manifest is written."""
    tables = {name: getattr(artifact, name) for name in KINDS[artifact.kind]}
    tables |= {name: artifact.qa[name] for name in QA_TABLES} if artifact.qa else {}
    if missing := [name for name, table in tables.items() if table is None]:
        raise ValueError(f"an artifact of kind {artifact.kind} has a {missing[0]} table")
    cast = {name: table.cast(ALL_TABLES[name]) for name, table in tables.items()}
    pieces, sharding = shards.layout(cast, shard_rows)
    root.mkdir(parents=True, exist_ok=True)
    shards.check_no_other_tables(root, tuple(ALL_TABLES))
    files = {}
    for name, table in pieces.items():
        path = root / name
        write_table_atomic(path, table)
        files[name] = {"sha256": file_sha256(path), "bytes": path.stat().st_size, "rows": table.num_rows}
    for stale in shards.stale_files(root, list(files)):  # an earlier artifact's, of another layout
        stale.unlink()
    manifest = {key: value for key, value in artifact.manifest.items() if key != shards.SHARDING}
    manifest = {**manifest, "files": files} | ({shards.SHARDING: sharding} if sharding else {})
    write_json_atomic(root / MANIFEST, manifest)
    return manifest
