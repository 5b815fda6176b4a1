"""Reading a key-token artifact from any location, with every check, and its documents one at a time.

``open_artifact`` is the one way in: an artifact in memory, a local directory or a Hub dataset.
``load_artifact`` checks the schema version, the file hashes and then the contents
(``pipeline.artifact.checks``: hashes prove nothing when whoever edited a table also rewrote the
manifest); ``iter_documents`` gives each document's text, evaluator tokens and key spans as numpy
arrays (``ArtifactDocument``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import definition
from pipeline.artifact.checks import check_artifact
from pipeline.artifact.inputs import check_against_inputs
from pipeline.artifact.qa import check_questions
from pipeline.artifact.schema import (
    ALL_TABLES,
    MANIFEST,
    NEEDS_TOKEN_VALUES,
    QA_TABLES,
    REQUIRED_SETTINGS,
    RUN_STATE,
    SCHEMA_VERSION,
    KeyTokenArtifact,
    declared_tables,
    has_questions,
    table_names,
)
from pipeline.artifact.shards import check_documents_of_shards, check_folder, check_layout, table_files
from pipeline.errors import PipelineError
from pipeline.files import recorded_path
from pipeline.hub import HUB_DATASET_PREFIX, is_hub_dataset, is_url
from pipeline.provenance import file_sha256

ARTIFACT_HINT = (
    "run `make keytokens` first (13 to 20 minutes for the default on 2 cores), or pass artifact=<dir>"
)


def normalized_location(location: str | Path) -> str:
    """A Hub dataset as given (its ``hf://datasets/`` in lower case); a local directory as an absolute
    path (Hydra changes directory); any other ``scheme://`` location is an error, not a path."""
    text = str(location)
    if is_hub_dataset(text):
        return HUB_DATASET_PREFIX + text[len(HUB_DATASET_PREFIX) :]
    if is_url(text):
        raise PipelineError(
            f"artifact {text}: not a local folder, and the one remote location read is "
            f"{HUB_DATASET_PREFIX}<org>/<name>[@revision]: pass an artifact folder or a Hub dataset"
        )
    return str(Path(text).absolute())


def open_artifact(location: str | Path | KeyTokenArtifact, verify_hashes: bool = True) -> KeyTokenArtifact:
    """The artifact at any location, checked (``load_artifact``): one already in memory, a local
    directory, or ``hf://datasets/<org>/<name>[@revision]`` (downloaded once, cached). ``origin``
    records where it came from, with the resolved commit for a Hub dataset."""
    if isinstance(location, KeyTokenArtifact):
        return location
    path, origin = locate_artifact(normalized_location(location))
    artifact = load_artifact(path, verify_hashes)
    artifact.origin = origin
    return artifact


def locate_artifact(spec: str) -> tuple[Path, dict[str, Any]]:
    """A local artifact directory, or a Hub dataset downloaded (``snapshot_download``, cached); the
    directory and where it came from."""
    if not is_hub_dataset(spec):
        path = Path(spec)
        if not path.exists():
            raise PipelineError(f"no key-token artifact at {path}: {ARTIFACT_HINT}")
        return path, {"path": recorded_path(path)}
    repo, _, revision = spec.removeprefix(HUB_DATASET_PREFIX).partition("@")
    from huggingface_hub import snapshot_download

    try:
        path = Path(snapshot_download(repo_id=repo, repo_type="dataset", revision=revision or None))
    except Exception as exc:  # offline, missing, gated: all one answer for the user
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise PipelineError(
            f"could not download key-token dataset '{repo}' from the Hugging Face Hub ({detail}): on a "
            f"connected machine run `hf download {repo} --repo-type dataset --local-dir DIR` "
            "and pass artifact=DIR"
        ) from exc
    return path, {"hub": repo, "revision": path.name, "requested_revision": revision or None}


def load_artifact(root: str | Path, verify_hashes: bool = True) -> KeyTokenArtifact:
    """Open an artifact: its manifest, schema version and kind, the file hashes, every content check
    (``pipeline.artifact.checks``), then the checks against its inputs where they are at hand
    (``pipeline.artifact.inputs``; skipped with the hashes when ``verify_hashes`` is False, right
    after writing them); the question tables, when its manifest declares them (``artifact.qa``). Any
    problem is a one-line PipelineError."""
    root = Path(root)
    manifest = read_manifest(root)
    check_folder(root, manifest)
    read = {name: read_table(root, name, manifest, verify_hashes) for name in table_names(manifest, root)}
    check_documents_of_shards(root, manifest, read)
    tables = {name: read.get(name) for name in ("documents", "tokens", "spans")}
    artifact = KeyTokenArtifact(root=root, manifest=manifest, **tables)
    if has_questions(manifest):
        artifact.qa = {name: read[name] for name in QA_TABLES}
    check_artifact(artifact)
    if artifact.qa is not None:
        check_questions(artifact)
    if verify_hashes:
        artifact.checked = check_against_inputs(artifact)
    return artifact


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
    check_layout(manifest, table_names(manifest, root), root)
    return manifest


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_table(root: Path, name: str, manifest: dict[str, Any], verify_hash: bool) -> pa.Table:
    """One table, whole: each of its files (one, or its shards in order: ``pipeline.artifact.shards``)
    present, listed in the manifest, with its hash (when asked) and schema, and a shard with the rows the
    manifest records."""
    names = table_files(manifest, name)
    pieces = []
    for file in names:
        path = root / file
        recorded = manifest["files"].get(file) if isinstance(manifest["files"], dict) else None
        if not path.is_file() or not isinstance(recorded, dict):
            of = (
                f" (shard {names.index(file) + 1} of {len(names)} of its {name} table)"
                if len(names) > 1
                else ""
            )
            raise PipelineError(f"artifact {root} is missing {file}{of}: regenerate it with `make keytokens`")
        if verify_hash and file_sha256(path) != recorded.get("sha256"):
            raise PipelineError(
                f"{path} does not match the sha256 in its manifest (altered or corrupted, or a file of "
                "another artifact): regenerate it"
            )
        pieces.append(read_parquet(path, ALL_TABLES[name], "regenerate it"))
        if len(names) > 1 and pieces[-1].num_rows != recorded.get("rows"):
            raise PipelineError(
                f"{path} has {pieces[-1].num_rows} rows, its manifest records {recorded.get('rows')} "
                "(a shard of another artifact or of another cut): regenerate it"
            )
    if len(pieces) == 1:
        return pieces[0]
    return pa.concat_tables([piece.cast(ALL_TABLES[name]) for piece in pieces])


def read_parquet(path: Path, schema: pa.Schema, fix: str) -> pa.Table:
    """A Parquet file with exactly ``schema`` and valid values (UTF-8 strings); a PipelineError that
    names the column and what is wrong, then ``fix``, otherwise."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise PipelineError(f"{path} is not a readable Parquet file ({first_sentence(exc)}): {fix}") from None
    if problem := schema_problem(table.schema, schema):
        raise PipelineError(f"{path} does not have the schema of version {SCHEMA_VERSION}: {problem}; {fix}")
    if problem := next((f"column {n} {p}" for n in table.column_names if (p := invalid(table[n]))), None):
        raise PipelineError(f"{path}: {problem}; {fix}")
    return table


def first_sentence(exc: Exception) -> str:
    """An Arrow error's first sentence, without the file name it repeats."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text.rpartition("': ")[2].split(". ")[0][:160]


def schema_problem(found: pa.Schema, expected: pa.Schema) -> str | None:
    """What differs between a table's schema and the expected one, naming the column; None if equal."""
    names, wanted = found.names, expected.names
    if missing := [n for n in wanted if n not in names]:
        return f"no column {missing[0]}"
    if extra := [n for n in names if n not in wanted]:
        return f"an extra column {extra[0]!r} (the columns are {', '.join(wanted)})"
    if names != wanted:
        return f"the columns are in another order (expected {', '.join(wanted)})"
    for field in expected:
        if not found.field(field.name).type.equals(field.type):
            return f"column {field.name} is {found.field(field.name).type}, not {field.type}"
    return None


def invalid(column: pa.ChunkedArray) -> str | None:
    """Why a column's values are invalid (e.g. strings that are not UTF-8), or None."""
    try:
        column.validate(full=True)
    except pa.ArrowException as exc:
        detail = str(exc).rpartition("Invalid: ")[2][:120]
        return f"holds invalid UTF-8 ({detail})" if "UTF8" in detail else f"holds invalid values ({detail})"
    return None


# ----------------------------------------------------------------------------------------------
# One document at a time


class ArtifactDocument:
    """One document of an artifact: its text, evaluator tokens and key spans, as numpy arrays.

    ``tokens`` is None for key spans alone (a key_spans artifact): the evaluator's offsets, LSD,
    LCL, short-context log-probs and soft weights are then None too (``has_token_values`` is False)."""

    def __init__(self, doc_id: str, text: str, tokens: Any | None, spans: Any):
        self.doc_id = doc_id
        self.text = text
        self.eval_offsets = self.lsd = self.long = self.short = self.soft_weight = None
        if tokens is not None:
            starts, ends = tokens["char_start"].to_numpy(), tokens["char_end"].to_numpy()
            self.eval_offsets = np.stack([starts, ends], axis=1)
            self.lsd = _floats(tokens["lsd"])
            self.long = _floats(tokens["long_logprob"])
            self.short = _floats(tokens["short_logprob"])
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
        key = definition.is_key(self.lsd, self.long, alpha, beta)
        starts, ends, _ = definition.merge_spans(self.eval_offsets[key, 0], self.eval_offsets[key, 1])
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
