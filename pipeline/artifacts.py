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
    schema_version, kind (``KINDS``; absent: ``per_token``), fingerprint (``settings_fingerprint``),
    settings (evaluator and its file sha256 or revision, K, d, alpha, beta, gamma,
    dtype, device, corpus, ...), per-document sha256, skipped documents with reasons, library
    versions, creation time, summary, and every file with its sha256 and size. Written last: an
    artifact without a manifest is unfinished.

Two kinds of artifact (``KINDS``; the manifest's ``kind``, ``per_token`` when absent): ``per_token``,
written by stage 1, has all three tables; ``key_spans``, imported from key spans computed elsewhere
(the paper's own, ``pipeline.official``), has ``documents`` and ``spans`` only: no per-token LCL or
LSD, so it gives PPL and LongPPL but not LongPPL-soft or re-thresholded (alpha, beta) values.

While stage 1 runs, each finished document lives in ``parts/<index>/`` (written to a temporary
directory and renamed, so a part is complete or absent) and ``run.json`` holds the settings
fingerprint that a resumed run must match (``pipeline.artifact_writer``). Every file is written
atomically (``pipeline.files``).

Reading: ``load_artifact`` checks the schema version, the file hashes and then the contents
(``pipeline.artifact_checks``: hashes prove nothing when whoever edited a table also rewrote the
manifest); ``iter_documents`` gives each document's text, evaluator tokens and key spans as numpy
arrays (``ArtifactDocument``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import keytokens
from pipeline.errors import PipelineError
from pipeline.provenance import file_sha256, json_sha256

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

# The kinds of artifact and the tables each declares (every column of a table, as in its schema
# above). The manifest's ``kind`` names one; manifests written before kinds existed are ``per_token``.
# The content checks that need a table run exactly when the kind declares it.
PER_TOKEN = "per_token"  # the keytokens stage: per-token log-probs, LSD, soft weights, key flags, spans
KEY_SPANS = "key_spans"  # imported key spans only: PPL and LongPPL, not LongPPL-soft or the grid
KINDS: dict[str, tuple[str, ...]] = {
    PER_TOKEN: ("documents", "tokens", "spans"),
    KEY_SPANS: ("documents", "spans"),
}
NEEDS_TOKEN_VALUES = (
    "needs per-token LSD, which this artifact (kind key_spans: key spans only) does not have; "
    "compute key tokens with `make keytokens` for it"
)
# What the manifest's settings must hold (the key-token definition the tables were made with).
REQUIRED_SETTINGS = ("K", "d", "alpha", "beta", "gamma", "evaluator")


def artifact_kind(manifest: dict[str, Any], where: str | Path = "artifact") -> str:
    """The manifest's artifact kind (``per_token`` for manifests written before kinds existed)."""
    kind = manifest.get("kind", PER_TOKEN)
    if kind not in KINDS:
        raise PipelineError(f"{where} has artifact kind {kind!r}; this pipeline reads {', '.join(KINDS)}")
    return kind


def declared_tables(manifest: dict[str, Any], where: str | Path = "artifact") -> tuple[str, ...]:
    """The tables an artifact has, by the kind its manifest declares."""
    return KINDS[artifact_kind(manifest, where)]


def settings_fingerprint(settings: dict[str, Any], kind: str = PER_TOKEN) -> str:
    """The fingerprint of an artifact: sha256 of what its numbers depend on, i.e. its settings without
    file locations (the evaluator's file hash or revision and the documents' hashes stand for them),
    so that the same run on another machine has the same fingerprint."""
    if kind == KEY_SPANS:
        return json_sha256(key_spans_identity(settings))
    identity = json.loads(json.dumps(settings))
    evaluator, corpus = identity.get("evaluator"), identity.get("corpus")
    if isinstance(evaluator, dict):
        evaluator.pop("path", None)
        if evaluator.get("kind") in ("local", "gguf"):  # the spec is a path too
            evaluator.pop("spec", None)
    if isinstance(corpus, dict):
        corpus.pop("path", None)
    return json_sha256(identity)


def key_spans_identity(settings: dict[str, Any]) -> dict[str, Any]:
    """What imported key spans depend on: the spans, the texts, the definition and the evaluator,
    not where the inputs were read from (a local copy and the Hub give one fingerprint)."""
    return {
        "kind": KEY_SPANS,
        **{k: settings[k] for k in ("K", "d", "alpha", "beta", "documents")},
        "evaluator": settings["evaluator"]["spec"],
        "source": {
            k: (settings.get("source") or {}).get(k) for k in ("repository", "commit", "files_sha256")
        },
    }


def table_from_columns(schema: pa.Schema, columns: dict[str, Any]) -> pa.Table:
    """A table of ``schema`` from one array per column (NaN becomes null: a missing value)."""
    return pa.table(
        {f.name: pa.array(columns[f.name], type=f.type, from_pandas=True) for f in schema}, schema=schema
    )


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
            f"connected machine run `hf download {repo} --repo-type dataset --local-dir DIR` "
            "and pass KEYTOKENS=DIR"
        ) from exc
    return path, {"hub": repo, "revision": path.name, "requested_revision": revision or None}


@dataclass
class KeyTokenArtifact:
    root: Path
    manifest: dict[str, Any]
    documents: pa.Table
    tokens: pa.Table | None  # None for a kind without a tokens table
    spans: pa.Table

    @property
    def settings(self) -> dict[str, Any]:
        return self.manifest["settings"]

    @property
    def kind(self) -> str:
        return artifact_kind(self.manifest, self.root)

    @property
    def has_token_values(self) -> bool:
        """Whether per-token LCL, LSD and soft weights are here (LongPPL-soft, the alpha/beta grid)."""
        return "tokens" in KINDS[self.kind]

    def texts(self) -> dict[str, str]:
        return dict(
            zip(self.documents["doc_id"].to_pylist(), self.documents["text"].to_pylist(), strict=True)
        )


def load_artifact(root: str | Path, verify_hashes: bool = True) -> KeyTokenArtifact:
    """Open an artifact: its manifest, schema version and kind, the file hashes (unless
    ``verify_hashes`` is False, right after writing them), then every content check
    (``pipeline.artifact_checks``). Any problem is a one-line PipelineError."""
    from pipeline.artifact_checks import check_artifact

    root = Path(root)
    manifest = read_manifest(root)
    tables: dict[str, pa.Table | None] = {"tokens": None}
    for name in declared_tables(manifest, root):
        tables[name] = read_table(root, name, manifest, verify_hashes)
    artifact = KeyTokenArtifact(root=root, manifest=manifest, **tables)
    check_artifact(artifact)
    return artifact


def load_built_artifact(root: str | Path) -> KeyTokenArtifact:
    """``load_artifact`` of an artifact that an earlier ``make keytokens`` must have written: its
    absence is an error that says so."""
    if not (Path(root) / MANIFEST).exists():
        raise PipelineError(f"no key-token artifact at {root}: run `make keytokens` first (about 7 minutes)")
    return load_artifact(root)


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest, checked for what every reader relies on: strict JSON, schema version, kind,
    fingerprint, the key-token settings and the files."""
    path = root / MANIFEST
    if not path.is_file():
        hint = (
            " (stage 1 has not finished: run `make keytokens` again to resume)"
            if (root / RUN_STATE).exists()
            else ""
        )
        raise PipelineError(f"no key-token artifact at {root}: {MANIFEST} is missing{hint}")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise PipelineError(
            f"{path} is not valid JSON ({str(exc).splitlines()[0][:120]}): it is cut off or damaged; "
            "regenerate the artifact with `make keytokens`, or download it again"
        ) from None
    if not isinstance(manifest, dict):
        raise PipelineError(f"{path} is not a JSON object: regenerate the artifact with `make keytokens`")
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise PipelineError(
            f"{root} has artifact schema version {version!r}; this pipeline reads version {SCHEMA_VERSION}: "
            "regenerate it with `make keytokens` or use a matching pipeline version"
        )
    declared_tables(manifest, root)
    settings = manifest.get("settings")
    missing = [k for k in REQUIRED_SETTINGS if not isinstance(settings, dict) or k not in settings]
    missing += [k for k in ("fingerprint", "files") if not manifest.get(k)]
    if missing:
        raise PipelineError(
            f"{path} lacks {', '.join(missing)}: not a complete key-token manifest; regenerate the "
            "artifact with `make keytokens`"
        )
    return manifest


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_table(root: Path, name: str, manifest: dict[str, Any], verify_hash: bool) -> pa.Table:
    """One table, present, listed in the manifest, with its hash (when asked) and schema."""
    path = root / f"{name}.parquet"
    recorded = manifest["files"].get(path.name) if isinstance(manifest["files"], dict) else None
    if not path.is_file() or not isinstance(recorded, dict):
        raise PipelineError(f"artifact {root} is missing {path.name}: regenerate it with `make keytokens`")
    if verify_hash and file_sha256(path) != recorded.get("sha256"):
        raise PipelineError(
            f"{path} does not match the sha256 in its manifest (altered or corrupted): regenerate it"
        )
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise PipelineError(f"{path} is not a readable Parquet file ({exc}): regenerate it") from None
    if not table.schema.equals(TABLES[name], check_metadata=False):
        raise PipelineError(f"{path} does not have the schema of version {SCHEMA_VERSION}")
    return table


# ----------------------------------------------------------------------------------------------
# One document at a time


class ArtifactDocument:
    """One document of an artifact: its text, evaluator tokens and key spans, as numpy arrays.

    ``tokens`` is None for key spans alone (a key_spans artifact): the evaluator's offsets, LSD,
    LCL and soft weights are then None too (``has_token_values`` is False)."""

    def __init__(self, doc_id: str, text: str, tokens: Any | None, spans: Any):
        self.doc_id = doc_id
        self.text = text
        self.eval_offsets = self.lsd = self.long = self.soft_weight = None
        if tokens is not None:
            starts, ends = tokens["char_start"].to_numpy(), tokens["char_end"].to_numpy()
            self.eval_offsets = np.stack([starts, ends], axis=1)
            self.lsd = _floats(tokens["lsd"])
            self.long = _floats(tokens["long_logprob"])
            self.soft_weight = _floats(tokens["soft_weight"])
        self.span_starts = spans["char_start"].to_numpy().astype(np.int64)
        self.span_ends = spans["char_end"].to_numpy().astype(np.int64)

    @property
    def has_token_values(self) -> bool:
        return self.lsd is not None

    def spans_at(self, alpha: float, beta: float) -> tuple[np.ndarray, np.ndarray]:
        """Key spans re-thresholded from the stored LSD and LCL: no evaluator needed."""
        if not self.has_token_values:
            raise PipelineError(f"re-thresholding key tokens (alpha, beta) {NEEDS_TOKEN_VALUES}")
        key = keytokens.is_key(self.lsd, self.long, alpha, beta)
        starts, ends, _ = keytokens.merge_spans(self.eval_offsets[key, 0], self.eval_offsets[key, 1])
        return starts, ends


def _floats(column: Any) -> np.ndarray:
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)


def iter_documents(artifact: KeyTokenArtifact) -> Iterator[ArtifactDocument]:
    """The artifact's documents in order; tokens and spans are sliced by the stored counts."""
    docs = artifact.documents
    token_ends = np.cumsum(docs["n_tokens"].to_numpy())
    span_ends = np.cumsum(docs["n_spans"].to_numpy())
    for i, (doc_id, text) in enumerate(
        zip(docs["doc_id"].to_pylist(), docs["text"].to_pylist(), strict=True)
    ):
        t0 = int(token_ends[i - 1]) if i else 0
        s0 = int(span_ends[i - 1]) if i else 0
        tokens = None if artifact.tokens is None else artifact.tokens.slice(t0, int(token_ends[i]) - t0)
        spans = artifact.spans.slice(s0, int(span_ends[i]) - s0)
        if tokens is not None and tokens.num_rows and tokens["doc_id"][0].as_py() != doc_id:
            raise PipelineError(
                f"artifact {artifact.root}: token rows are not in document order at '{doc_id}'"
            )
        yield ArtifactDocument(doc_id, text, tokens, spans)
