"""The key-token artifact: the contract between stage 1 and stage 2. This module owns its schema.

An artifact is a directory ``artifacts/keytokens/<name>/`` holding:

``documents.parquet`` (one row per scored document)
    doc_id, doc_index, text (exactly the text scored), sha256 (of that text, UTF-8),
    source_sha256 (of the full corpus text), n_chars, n_source_chars, n_tokens (evaluator tokens
    of the scored text, without BOS), truncated, n_key_tokens, n_spans, offsets_from.
``tokens.parquet`` (one row per evaluator token, BOS excluded)
    doc_id, token_index, token_id, char_start, char_end (the token's [start, end) characters),
    long_logprob (LCL; null for a first token with nothing to condition on), short_logprob (null
    where the token has no short context), lsd (long - short), soft_weight (min(exp(lsd), gamma)),
    is_key (lsd > alpha and long > beta).
``spans.parquet`` (merged key-token character intervals)
    doc_id, span_index, char_start, char_end, n_tokens.
``manifest.json``
    schema_version, settings (evaluator and its file sha256 or revision, K, d, alpha, beta, gamma,
    dtype, device, corpus, ...), per-document sha256, skipped documents with reasons, library
    versions, creation time, summary, and every file with its sha256 and size. Written last: an
    artifact without a manifest is unfinished.

While stage 1 runs, each finished document lives in ``parts/<index>/`` (written to a temporary
directory and renamed, so a part is complete or absent) and ``run.json`` holds the settings
fingerprint that a resumed run must match. Every file is written atomically.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.errors import PipelineError
from pipeline.provenance import file_sha256, text_sha256

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
RUN_STATE = "run.json"
PARTS = "parts"

DOCUMENTS_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("doc_index", pa.int32()),
        ("text", pa.large_string()),
        ("sha256", pa.string()),
        ("source_sha256", pa.string()),
        ("n_chars", pa.int64()),
        ("n_source_chars", pa.int64()),
        ("n_tokens", pa.int32()),
        ("truncated", pa.bool_()),
        ("n_key_tokens", pa.int32()),
        ("n_spans", pa.int32()),
        ("offsets_from", pa.string()),
    ]
)
TOKENS_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("token_index", pa.int32()),
        ("token_id", pa.int64()),
        ("char_start", pa.int32()),
        ("char_end", pa.int32()),
        ("long_logprob", pa.float64()),
        ("short_logprob", pa.float64()),
        ("lsd", pa.float64()),
        ("soft_weight", pa.float64()),
        ("is_key", pa.bool_()),
    ]
)
SPANS_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("span_index", pa.int32()),
        ("char_start", pa.int32()),
        ("char_end", pa.int32()),
        ("n_tokens", pa.int32()),
    ]
)
TABLES = {"documents": DOCUMENTS_SCHEMA, "tokens": TOKENS_SCHEMA, "spans": SPANS_SCHEMA}


# ----------------------------------------------------------------------------------------------
# Atomic file writes


def write_bytes_atomic(path: Path, data: bytes) -> None:
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
    write_bytes_atomic(
        path, (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
    )


def write_table_atomic(path: Path, table: pa.Table) -> None:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    write_bytes_atomic(path, sink.getvalue().to_pybytes())


# ----------------------------------------------------------------------------------------------
# Writing, with resume


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
        """True when a finished artifact with these settings is already here."""
        manifest = self.root / MANIFEST
        if not manifest.is_file():
            return False
        recorded = json.loads(manifest.read_text())
        self._check_same(recorded.get("fingerprint"), recorded.get("settings", {}))
        return True

    def start(self) -> None:
        state = self.root / RUN_STATE
        if state.is_file():
            recorded = json.loads(state.read_text())
            self._check_same(recorded.get("fingerprint"), recorded.get("settings", {}))
        else:
            write_json_atomic(state, {"fingerprint": self.fingerprint, "settings": self.settings})
        self.parts.mkdir(parents=True, exist_ok=True)

    def _check_same(self, fingerprint: str | None, recorded: dict[str, Any]) -> None:
        if fingerprint == self.fingerprint:
            return
        changed = sorted(
            k for k in set(recorded) | set(self.settings) if recorded.get(k) != self.settings.get(k)
        )
        detail = "; ".join(f"{k}: {recorded.get(k)!r} -> {self.settings.get(k)!r}" for k in changed[:4])
        raise PipelineError(
            f"{self.root} holds a run with other settings ({detail or 'fingerprint differs'}): "
            "pass name=<new name> to keep both, or delete that directory to start over"
        )

    def finished(self) -> set[int]:
        """Indices of documents whose part is complete."""
        if not self.parts.is_dir():
            return set()
        return {int(p.name) for p in self.parts.iterdir() if p.is_dir() and p.name.isdigit()}

    def write_part(self, index: int, document: dict[str, Any], tokens: pa.Table, spans: pa.Table) -> None:
        """Write one document's rows; the part appears whole or not at all."""
        staging = Path(tempfile.mkdtemp(dir=self.parts, prefix=".tmp-"))
        try:
            write_table_atomic(
                staging / "documents.parquet", pa.Table.from_pylist([document], DOCUMENTS_SCHEMA)
            )
            write_table_atomic(staging / "tokens.parquet", tokens.cast(TOKENS_SCHEMA))
            write_table_atomic(staging / "spans.parquet", spans.cast(SPANS_SCHEMA))
            os.replace(staging, self.parts / f"{index:06d}")
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def finalize(self, indices: Iterable[int], manifest_extra: dict[str, Any]) -> dict[str, Any]:
        """Concatenate the parts in document order, write the tables, then the manifest, last."""
        indices = sorted(indices)
        files = {}
        for name, schema in TABLES.items():
            pieces = [pq.read_table(self.parts / f"{i:06d}" / f"{name}.parquet") for i in indices]
            table = pa.concat_tables(pieces).cast(schema) if pieces else schema.empty_table()
            path = self.root / f"{name}.parquet"
            write_table_atomic(path, table)
            files[path.name] = {
                "sha256": file_sha256(path),
                "bytes": path.stat().st_size,
                "rows": table.num_rows,
            }
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "fingerprint": self.fingerprint,
            "settings": self.settings,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "files": files,
            **manifest_extra,
        }
        write_json_atomic(self.root / MANIFEST, manifest)
        shutil.rmtree(self.parts, ignore_errors=True)
        (self.root / RUN_STATE).unlink(missing_ok=True)
        return manifest


# ----------------------------------------------------------------------------------------------
# Reading, with verification

HUB_PREFIX = "hf://datasets/"


def locate_artifact(spec: str) -> tuple[Path, dict[str, Any]]:
    """A local artifact directory, or ``hf://datasets/<org>/<name>[@revision]`` downloaded from the
    Hub (``snapshot_download``, cached); returns the directory and where it came from, with the
    resolved commit for a Hub dataset."""
    if not spec.startswith(HUB_PREFIX):
        path = Path(spec)
        if not path.exists():
            raise PipelineError(
                f"no key-token artifact at {path}: run `make keytokens` first, or pass KEYTOKENS=<dir>"
            )
        return path, {"path": str(path)}
    repo, _, revision = spec.removeprefix(HUB_PREFIX).partition("@")
    from huggingface_hub import snapshot_download

    try:
        path = Path(snapshot_download(repo_id=repo, repo_type="dataset", revision=revision or None))
    except Exception as exc:  # offline, missing, gated: all one answer for the user
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise PipelineError(
            f"could not download key-token dataset '{repo}' from the Hugging Face Hub ({detail}): on a "
            f"connected machine run `huggingface-cli download {repo} --repo-type dataset --local-dir DIR` "
            "and pass KEYTOKENS=DIR"
        ) from exc
    return path, {"hub": repo, "revision": path.name, "requested_revision": revision or None}


@dataclass
class KeyTokenArtifact:
    root: Path
    manifest: dict[str, Any]
    documents: pa.Table
    tokens: pa.Table
    spans: pa.Table

    @property
    def settings(self) -> dict[str, Any]:
        return self.manifest["settings"]

    def texts(self) -> dict[str, str]:
        return dict(
            zip(self.documents["doc_id"].to_pylist(), self.documents["text"].to_pylist(), strict=True)
        )


def load_artifact(root: str | Path, verify_hashes: bool = True) -> KeyTokenArtifact:
    """Open an artifact, checking its schema version, file hashes and document text hashes."""
    root = Path(root)
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        hint = (
            " (stage 1 has not finished: run `make keytokens` again to resume)"
            if (root / RUN_STATE).exists()
            else ""
        )
        raise PipelineError(f"no key-token artifact at {root}: {MANIFEST} is missing{hint}")
    manifest = json.loads(manifest_path.read_text())
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise PipelineError(
            f"{root} has artifact schema version {version!r}; this pipeline reads version {SCHEMA_VERSION}: "
            "regenerate it with `make keytokens` or use a matching pipeline version"
        )
    tables = {}
    for name, schema in TABLES.items():
        path = root / f"{name}.parquet"
        recorded = manifest.get("files", {}).get(path.name)
        if not path.is_file() or recorded is None:
            raise PipelineError(
                f"artifact {root} is missing {path.name}: regenerate it with `make keytokens`"
            )
        if verify_hashes and file_sha256(path) != recorded["sha256"]:
            raise PipelineError(
                f"{path} does not match the sha256 in its manifest (altered or corrupted): regenerate it"
            )
        table = pq.read_table(path)
        if not table.schema.equals(schema, check_metadata=False):
            raise PipelineError(f"{path} does not have the schema of version {SCHEMA_VERSION}")
        tables[name] = table
    artifact = KeyTokenArtifact(root=root, manifest=manifest, **tables)
    for doc_id, text, sha in zip(
        artifact.documents["doc_id"].to_pylist(),
        artifact.documents["text"].to_pylist(),
        artifact.documents["sha256"].to_pylist(),
        strict=True,
    ):
        if text_sha256(text) != sha:
            raise PipelineError(f"artifact {root}: the text of document '{doc_id}' does not match its sha256")
    return artifact
