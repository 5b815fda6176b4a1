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
``questions.parquet`` and ``evidence.parquet`` (optional: a corpus with questions, LooGLE's)
    questions: doc_id, question_index (0, 1, ... within its document), task, source_id (the question's
    id in its data, ``<title>#<index>``), type (null when the data gives none), question, answer (a
    cloze answer as JSON), n_evidence. evidence (one row per located span; an unlocated evidence
    string is one row with null offsets): doc_id, question_index, evidence_index, piece_index, rule
    (how it was located: one of ``EVIDENCE_RULES``, or ``unlocated``), char_start, char_end (of the
    full source text: the kept text is its prefix), occurrences, ratio (the fuzzy rule's), text (the
    evidence string). The
    manifest's ``questions`` (their source, revision and fingerprints, the alignment) declares them;
    an artifact without it has none, and its files and bytes are those it always had.
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
fingerprint that a resumed run must match (``pipeline.artifact.writer``). Every file is written
atomically (``pipeline.files``).

An artifact has two identities (``pipeline.artifact.identity``): its exact *contents*
(``contents_sha256``: the tables' values, however Parquet stored them; a copy or a Hub download must
match it), and *the same artifact* (``Identity``: the *fingerprint*, ``settings_fingerprint``, what its
numbers depend on; the discrete contents; per-token values within a measured tolerance), which a run
of stage 1 on another machine keeps. Results record both.

Each table is one file, ``<table>.parquet``, by default; for large corpora, shards named as Hub datasets
name theirs (``tokens-00000-of-00004.parquet``), cut at document boundaries and recorded in the
manifest's ``sharding`` (``pipeline.artifact.shards``): the same tables, so the same identities.

Writing is ``pipeline.artifact.writer``; reading, with every check, ``pipeline.artifact.reader``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.artifact.identity import Identity, artifact_identity, tables_sha256
from pipeline.errors import PipelineError
from pipeline.provenance import json_sha256
from pipeline.text import locating

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
RUN_STATE = "run.json"
PARTS = "parts"
ENGINE = ".datatrove"  # the engine's folder inside the artifact while it runs (removed once it is written)

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
QUESTIONS_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("question_index", pa.int32()),
        ("task", pa.string()),
        ("source_id", pa.string()),
        ("type", pa.string()),
        ("question", pa.large_string()),
        ("answer", pa.large_string()),
        ("n_evidence", pa.int32()),
    ]
)
EVIDENCE_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("question_index", pa.int32()),
        ("evidence_index", pa.int32()),
        ("piece_index", pa.int32()),
        ("rule", pa.string()),
        ("char_start", pa.int32()),
        ("char_end", pa.int32()),
        ("occurrences", pa.int32()),
        ("ratio", pa.float64()),
        ("text", pa.large_string()),
    ]
)
# The optional question tables, declared by the manifest's ``QUESTIONS`` record (``has_questions``).
QA_TABLES = {"questions": QUESTIONS_SCHEMA, "evidence": EVIDENCE_SCHEMA}
ALL_TABLES = {**TABLES, **QA_TABLES}
QUESTIONS = "questions"
# The rules that locate an evidence string (``pipeline.text.locating``); a row names one, or UNLOCATED.
EVIDENCE_RULES, UNLOCATED = locating.RULES, locating.UNLOCATED

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


def has_questions(manifest: dict[str, Any]) -> bool:
    """Whether the manifest declares the question tables (a ``questions`` record)."""
    return QUESTIONS in manifest


def table_names(manifest: dict[str, Any], where: str | Path = "artifact") -> tuple[str, ...]:
    """Every table an artifact has: those its kind declares, then the question tables if it has them."""
    return declared_tables(manifest, where) + (tuple(QA_TABLES) if has_questions(manifest) else ())


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


def contents_sha256(tables: dict[str, pa.Table]) -> str:
    """The exact contents hash of an artifact's tables (in their kind's order), each cast to its schema
    (``identity.tables_sha256``)."""
    return tables_sha256({name: table.cast(ALL_TABLES[name]) for name, table in tables.items()})


def table_from_columns(schema: pa.Schema, columns: dict[str, Any]) -> pa.Table:
    """A table of ``schema`` from one array per column (NaN becomes null: a missing value)."""
    return pa.table(
        {f.name: pa.array(columns[f.name], type=f.type, from_pandas=True) for f in schema}, schema=schema
    )


@dataclass
class KeyTokenArtifact:
    root: Path
    manifest: dict[str, Any]
    documents: pa.Table
    tokens: pa.Table | None  # None for a kind without a tokens table
    spans: pa.Table
    qa: dict[str, pa.Table] | None = None  # the question tables (``QA_TABLES``), when it has them
    origin: dict[str, Any] = field(default_factory=dict)  # where it was read from (path or Hub commit)
    checked: dict[str, str] = field(default_factory=dict)  # checks against its inputs (``artifact.inputs``)

    @property
    def settings(self) -> dict[str, Any]:
        return self.manifest["settings"]

    @property
    def kind(self) -> str:
        return artifact_kind(self.manifest, self.root)

    @cached_property
    def contents(self) -> str:
        """The contents hash of its tables (``contents_sha256``): with the fingerprint, its identity."""
        tables = {name: getattr(self, name) for name in KINDS[self.kind]}
        return contents_sha256({**tables, **(self.qa or {})})

    @cached_property
    def identity(self) -> Identity:
        """What makes another run's artifact *the same artifact* as this one (``artifact.identity``)."""
        return artifact_identity(self)

    @property
    def has_token_values(self) -> bool:
        """Whether per-token LCL, LSD and soft weights are here (LongPPL-soft, the alpha/beta grid)."""
        return "tokens" in KINDS[self.kind]

    @property
    def has_questions(self) -> bool:
        return self.qa is not None

    @property
    def questions(self) -> pa.Table:
        """The questions table (``questions.parquet``); one PipelineError when it has none."""
        return self._qa("questions")

    @property
    def evidence(self) -> pa.Table:
        """The located evidence (``evidence.parquet``); one PipelineError when it has no questions."""
        return self._qa("evidence")

    def _qa(self, name: str) -> pa.Table:
        if self.qa is None:
            corpus = (self.settings.get("corpus") or {}).get("name", "?")
            raise PipelineError(
                f"artifact {self.root} has no questions (its corpus '{corpus}' carries none): compute key "
                'tokens on a corpus with questions, e.g. `make keytokens ARGS="corpus=loogle_sample"`'
            )
        return self.qa[name]

    def texts(self) -> dict[str, str]:
        return dict(
            zip(self.documents["doc_id"].to_pylist(), self.documents["text"].to_pylist(), strict=True)
        )


def new_manifest(
    kind: str, fingerprint: str, settings: dict[str, Any], extra: dict[str, Any], files: dict | None = None
) -> dict[str, Any]:
    """A manifest: schema version, kind, fingerprint, settings, creation time, the files (filled in
    by ``writer.write_artifact``; empty for an artifact held in memory) and ``extra`` (per-document
    records, skipped documents, library versions, run details)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "fingerprint": fingerprint,
        "settings": settings,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "files": files or {},
        **extra,
    }
