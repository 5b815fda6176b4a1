"""An artifact's two identities: its exact bytes, and *the same artifact* recomputed elsewhere.

*Exact* (``contents``, ``schema.contents_sha256``): every value of the tables, however Parquet stored them.
A copy (a Hub download, a cache, a backup) must match it bit for bit.

*The same artifact* (``Identity``): the same settings (fingerprint), the same discrete contents, and
per-token values within ``TOLERANCE``. Stage 1 run on another CPU (other SIMD kernels), with other
thread counts or other ``head_chunk``, ``vocab_tile`` or ``window_batch_tokens`` sums floats in another
order, so its log-probs differ in their last bits while every text, token, offset, key flag and span
stays the same (measured: ``docs/reproducibility.md``). The discrete contents are hashed
(``discrete``: the documents table; per document the token ids, offsets and which values are null
(``tokens``), the key flags and the spans (``keys``)); the values are summarised per document and column
(``values``: sum, position-weighted sum, min and max over the tokens that have one) so that a results
line or a refresh record can judge equivalence without the original files. Two artifacts at hand are
compared value by value (``compare_tables``). An artifact with questions (LooGLE's) is also its
questions: their tables' hash (``questions``: every question, answer and evidence string and where it
was located), so the same key tokens with other questions are not the same artifact.

A summary is a necessary condition: values within the tolerance token by token always give summaries
within ``summary_bounds``; a summary cannot prove the converse (only the tables can), and the exact
contents hash still tells the bytes apart.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Per-token absolute tolerance of each value column (nats; soft weights in weight units) between two
# float32 (or float64) runs of stage 1 with the same settings: 2.4x the largest difference between two
# real CPUs' default artifacts (AMD AVX2 and Intel AVX-512: 4.2e-4 nats of LCL and LSD; soft weights
# 1.4e-3, 3.5x: docs/reproducibility.md, `studies/cross_cpu.py`), a margin that an artifact of the
# paper's 1.6M tokens may not keep; a soft weight's is gamma x LSD's. 16-bit runs on GPUs are not
# within it (their kernels differ by far more).
TOLERANCE = {"long_logprob": 1e-3, "short_logprob": 1e-3, "lsd": 1e-3, "soft_weight": 5e-3}
VALUE_COLUMNS = tuple(TOLERANCE)
STATS = ("sum", "weighted_sum", "min", "max")
DISCRETE_TOKEN_COLUMNS = ("token_id", "char_start", "char_end")
KEY_COLUMNS = ("char_start", "char_end", "n_tokens")  # of a document's spans


def tables_sha256(tables: dict[str, pa.Table]) -> str:
    """The exact contents hash of tables (``schema.contents_sha256`` casts them to their schemas first):
    for each table and each column, in order, the names, the row count, the null mask and the values
    (integers as little-endian int64, floats as float64, booleans as bytes, strings as their int64
    UTF-8 lengths then bytes; nulls as zeros). Independent of Parquet's encoding, compression and
    chunking: the same values always give the same hash."""
    digest = hashlib.sha256(b"longppl-artifact-contents-1")
    for name, table in tables.items():
        digest.update(f"\0{name}\0{table.num_rows}".encode())
        for field_, column in zip(table.schema, table.columns, strict=True):
            digest.update(f"\0{field_.name}\0".encode())
            for part in column_bytes(column.combine_chunks()):
                digest.update(part)
    return digest.hexdigest()


def column_bytes(array: pa.Array) -> list[bytes | memoryview]:
    """One column's canonical bytes: its null mask, then its values with nulls as zeros."""
    nulls = null_mask_bytes(array)
    kind = array.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = array.fill_null("").cast(pa.large_string())
        lengths = np.asarray(pc.binary_length(text).to_numpy(), dtype="<i8")
        offsets = np.frombuffer(text.buffers()[1], dtype="<i8")[text.offset : text.offset + len(text) + 1]
        data = text.buffers()[2]
        body = memoryview(data)[offsets[0] : offsets[-1]] if data is not None and len(text) else b""
        return [nulls, lengths.tobytes(), body]
    values = array.fill_null(False if pa.types.is_boolean(kind) else 0).to_numpy(zero_copy_only=False)
    dtype = "<f8" if pa.types.is_floating(kind) else "u1" if pa.types.is_boolean(kind) else "<i8"
    return [nulls, np.asarray(values).astype(dtype).tobytes()]


def null_mask_bytes(array: pa.Array) -> bytes:
    return np.packbits(np.asarray(array.is_null().to_numpy(zero_copy_only=False), dtype=bool)).tobytes()


# ----------------------------------------------------------------------------------------------
# The same artifact: discrete contents and value summaries


@dataclass(frozen=True)
class DocumentIdentity:
    """One document's part of an artifact's identity: hashes of its tokens (ids, offsets, which values
    are null; None without a tokens table) and of its key tokens (flags and merged spans), and its
    value summaries (column -> stat -> value; empty without a tokens table)."""

    tokens: str | None
    keys: str
    values: dict[str, dict[str, float | None]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "keys": self.keys, "values": self.values}


@dataclass(frozen=True)
class Identity:
    """What makes two artifacts *the same artifact*: the fingerprint, the discrete hash, and per
    document its hashes and value summaries (``document_identity``)."""

    fingerprint: str
    discrete: str
    documents: dict[str, DocumentIdentity]
    n_tokens: dict[str, int]
    questions: str | None = None  # the question tables' hash (``questions_sha256``), where it has them

    def record(self) -> dict[str, Any]:
        """The form results lines and refresh records carry (``from_record`` reads it back); the
        questions' hash only where the artifact has questions, so other records are as before."""
        return {
            "discrete": self.discrete,
            "documents": {
                doc: {**ident.to_dict(), "n_tokens": self.n_tokens[doc]}
                for doc, ident in self.documents.items()
            },
        } | ({"questions": self.questions} if self.questions is not None else {})

    @classmethod
    def from_record(cls, fingerprint: str, record: dict[str, Any]) -> Identity:
        """The identity a record holds; ValueError naming its first field of the wrong type."""
        check_record(record)
        docs = record["documents"]
        return cls(
            fingerprint,
            record["discrete"],
            {d: DocumentIdentity(v["tokens"], v["keys"], v.get("values") or {}) for d, v in docs.items()},
            {d: int(v["n_tokens"]) for d, v in docs.items()},
            record.get("questions"),
        )


_MISSING = object()


def check_record(record: Any, prefix: str = "") -> None:
    """ValueError naming (`documents.<doc>.values.lsd.sum`) the first field of an identity record
    (``Identity.record``) that is missing or of the wrong type: hashes are strings, counts integers,
    summaries finite numbers (or null) of known columns and statistics. ``prefix``: the record's own
    field (``artifact.identity``), named before each of its fields."""
    top = f"{prefix}." if prefix else ""
    _expect(record, dict, prefix, "an object")
    _expect(record.get("discrete", _MISSING), str, f"{top}discrete", "a string")
    if record.get("questions") is not None:
        _expect(record["questions"], str, f"{top}questions", "a string or null")
    docs = record.get("documents", _MISSING)
    _expect(docs, dict, f"{top}documents", "an object")
    for doc, entry in docs.items():
        where = f"{top}documents.{doc}"
        _expect(entry, dict, where, "an object")
        tokens = entry.get("tokens", _MISSING)
        if tokens is not None:
            _expect(tokens, str, f"{where}.tokens", "a string or null")
        _expect(entry.get("keys", _MISSING), str, f"{where}.keys", "a string")
        count = entry.get("n_tokens", _MISSING)
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count < 2**63:
            raise ValueError(_wrong(count, f"{where}.n_tokens", "a count"))
        values = entry.get("values") or {}
        _expect(values, dict, f"{where}.values", "an object")
        for column, stats in values.items():
            _expect(
                column if column in TOLERANCE else None, str, f"{where}.values.{column}", "a value column"
            )
            _expect(stats, dict, f"{where}.values.{column}", "an object")
            for stat, x in stats.items():
                at = f"{where}.values.{column}.{stat}"
                _expect(stat if stat in STATS else None, str, at, f"a statistic ({', '.join(STATS)})")
                if x is not None and (
                    isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x)
                ):
                    raise ValueError(_wrong(x, at, "a finite number or null"))


def _expect(value: Any, kind: type, where: str, what: str) -> None:
    if not isinstance(value, kind):
        raise ValueError(_wrong(value, where, what))


def _wrong(value: Any, where: str, what: str) -> str:
    found = "missing" if value is _MISSING else f"{type(value).__name__} {str(value)[:40]!r}"
    return f"`{where or 'identity'}` is {found}, not {what}"


def artifact_identity(artifact: Any) -> Identity:
    """The identity of a ``KeyTokenArtifact`` (its tables as loaded: call on a checked artifact)."""
    docs = artifact.documents
    doc_ids = docs["doc_id"].to_pylist()
    n_tokens = [int(n) for n in docs["n_tokens"].to_pylist()]
    token_parts = _split(artifact.tokens, n_tokens) if artifact.tokens is not None else [None] * len(doc_ids)
    span_parts = _split(artifact.spans, [int(n) for n in docs["n_spans"].to_pylist()])
    per_doc = {
        doc: document_identity(tokens, spans)
        for doc, tokens, spans in zip(doc_ids, token_parts, span_parts, strict=True)
    }
    digest = hashlib.sha256(b"longppl-artifact-discrete-1")
    for part in (b for column in docs.columns for b in column_bytes(column.combine_chunks())):
        digest.update(part)
    for doc, ident in per_doc.items():
        digest.update(f"\0{doc}\0{ident.tokens}\0{ident.keys}".encode())
    return Identity(
        artifact.manifest["fingerprint"],
        digest.hexdigest(),
        per_doc,
        dict(zip(doc_ids, n_tokens, strict=True)),
        questions_sha256(artifact.qa),
    )


def questions_sha256(qa: dict[str, pa.Table] | None) -> str | None:
    """The hash of an artifact's question tables (every question, answer, evidence string and its
    location; ``tables_sha256``), None without them: the key tokens alone do not say which questions
    an artifact answers for."""
    return None if qa is None else tables_sha256(qa)[:32]


def _split(table: pa.Table, counts: list[int]) -> list[pa.Table]:
    """A table grouped by document in document order, cut into one table per document."""
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    return [table.slice(int(a), int(b - a)) for a, b in itertools.pairwise(starts)]


def document_identity(tokens: pa.Table | None, spans: pa.Table) -> DocumentIdentity:
    """One document's hashes and summaries (its rows of the tokens and spans tables)."""
    keys = hashlib.sha256(b"keys")
    for name in KEY_COLUMNS:
        keys.update(np.asarray(spans[name].to_numpy(), dtype="<i8").tobytes())
    if tokens is None:
        return DocumentIdentity(None, keys.hexdigest()[:32])
    keys.update(np.asarray(tokens["is_key"].to_numpy(zero_copy_only=False), dtype="u1").tobytes())
    ids = hashlib.sha256(b"tokens")
    for name in DISCRETE_TOKEN_COLUMNS:
        ids.update(np.asarray(tokens[name].to_numpy(), dtype="<i8").tobytes())
    for name in VALUE_COLUMNS:
        ids.update(null_mask_bytes(tokens[name].combine_chunks()))
    values = {name: summarise(tokens[name].combine_chunks()) for name in VALUE_COLUMNS}
    return DocumentIdentity(ids.hexdigest()[:32], keys.hexdigest()[:32], values)


def summarise(column: pa.Array) -> dict[str, float | None]:
    """Sum, position-weighted sum (weight: the token's index / the document's token count), min and
    max over the non-null values of one column of one document (None where there are none)."""
    values = column.to_numpy(zero_copy_only=False).astype(np.float64)
    present = ~np.isnan(values)
    if not present.any():
        return dict.fromkeys(STATS)
    where = np.arange(values.size, dtype=np.float64) / values.size
    kept = values[present]
    return {
        "sum": float(kept.sum()),
        "weighted_sum": float((kept * where[present]).sum()),
        "min": float(kept.min()),
        "max": float(kept.max()),
    }


def summary_bounds(tolerance: float, n_values: int) -> dict[str, float]:
    """How far each statistic of two documents' summaries may differ when every value differs by at
    most ``tolerance``: n x tolerance for the sums (a weight is below 1), the tolerance for min and max."""
    return {
        "sum": n_values * tolerance,
        "weighted_sum": n_values * tolerance,
        "min": tolerance,
        "max": tolerance,
    }


# ----------------------------------------------------------------------------------------------
# Judging


def differences(found: Identity, expected: Identity, tolerance: dict[str, float] = TOLERANCE) -> list[str]:
    """Why ``found`` is not the same artifact as ``expected``, one line per kind of difference (empty:
    it is); names the documents whose texts, tokens, key spans or values differ, and says when the
    questions differ (both artifacts having them)."""
    if found.fingerprint != expected.fingerprint:
        return [
            f"fingerprint {found.fingerprint[:12]}, expected {expected.fingerprint[:12]} (other settings)"
        ]
    if list(found.documents) != list(expected.documents):
        return [f"documents {_names(found.documents)}, expected {_names(expected.documents)}"]
    problems = []
    for what in ("tokens", "keys"):
        differ = [
            d
            for d in found.documents
            if getattr(found.documents[d], what) != getattr(expected.documents[d], what)
        ]
        if differ:
            label = "token ids, offsets or null values" if what == "tokens" else "key tokens or key spans"
            problems.append(f"{label} differ in {_names(differ)}")
    if not problems and found.discrete != expected.discrete:
        problems.append("the documents table differs (texts, hashes or counts)")
    if None not in (found.questions, expected.questions) and found.questions != expected.questions:
        same = "the same key tokens, " if not problems else ""
        problems.append(
            f"{same}other questions, answers or evidence (questions {found.questions[:12]}, expected "
            f"{expected.questions[:12]})"
        )
    values = [
        f"{doc} ({detail})"
        for doc in found.documents
        if (detail := _value_difference(found, expected, doc, tolerance))
    ]
    if values:
        problems.append("values beyond the tolerance in " + "; ".join(values))
    return problems


def _value_difference(found: Identity, expected: Identity, doc: str, tolerance: dict[str, float]) -> str:
    """The first statistic of ``doc`` beyond its bound, described (empty: all within)."""
    mine, theirs = found.documents[doc].values, expected.documents[doc].values
    for column, eps in tolerance.items():
        if column not in mine and column not in theirs:
            continue
        a, b = mine.get(column) or {}, theirs.get(column) or {}
        for stat, bound in summary_bounds(eps, found.n_tokens[doc]).items():
            x, y = a.get(stat), b.get(stat)
            if (x is None) != (y is None) or (
                x is not None and not math.isclose(x, y, rel_tol=0, abs_tol=bound)
            ):
                return f"{column} {stat} {x} against {y}, bound {bound:g}"
    return ""


def _names(docs: Any) -> str:
    docs = list(docs)
    return ", ".join(docs[:8]) + (f" and {len(docs) - 8} more" if len(docs) > 8 else "")


def compare_tables(a: Any, b: Any) -> dict[str, Any]:
    """Two artifacts at hand (``KeyTokenArtifact``) compared value by value over the documents both
    have with the same tokens (ids, offsets, null values): per value column the number of values and
    the median, 99th and 99.9th percentiles and max of |a - b|; the key flags that differ, per document;
    per column the documents with values beyond ``TOLERANCE`` (``beyond``: document -> how many, the
    largest |a - b|)."""
    ids_a, ids_b = a.identity.documents, b.identity.documents
    common = [
        d for d in ids_a if d in ids_b and ids_a[d].tokens is not None and ids_a[d].tokens == ids_b[d].tokens
    ]
    tokens_a, tokens_b = _by_document(a), _by_document(b)
    flags = {}
    diffs: dict[str, list[np.ndarray]] = {name: [] for name in VALUE_COLUMNS}
    beyond: dict[str, dict[str, tuple[int, float]]] = {name: {} for name in VALUE_COLUMNS}
    for doc in common:
        x, y = tokens_a[doc], tokens_b[doc]
        flipped = _array(x, "is_key") != _array(y, "is_key")
        if flipped.any():
            flags[doc] = int(flipped.sum())
        for name in VALUE_COLUMNS:
            u, v = _array(x, name), _array(y, name)
            both = ~np.isnan(u) & ~np.isnan(v)
            diffs[name].append(np.abs(u[both] - v[both]))
            if (far := diffs[name][-1] > TOLERANCE[name]).any():
                beyond[name][doc] = (int(far.sum()), float(diffs[name][-1].max()))
    return {
        "documents": common,
        "key_flags_differ": flags,
        "beyond": beyond,
        "columns": {name: _quantiles(np.concatenate(d) if d else np.array([])) for name, d in diffs.items()},
    }


def table_differences(report: dict[str, Any]) -> list[str]:
    """Why two artifacts at hand are not the same artifact by their values (``compare_tables``'s
    report): one line per value column with values beyond ``TOLERANCE``, naming the documents."""
    out = []
    for name, docs in report["beyond"].items():
        if docs:
            worst = sorted(docs.items(), key=lambda item: -item[1][1])
            listed = ", ".join(f"{doc} ({n}, max {m:.3g})" for doc, (n, m) in worst[:8])
            more = f" and {len(worst) - 8} more" if len(worst) > 8 else ""
            out.append(f"{name} values beyond the tolerance {TOLERANCE[name]:g} in {listed}{more}")
    return out


def _by_document(artifact: Any) -> dict[str, pa.Table]:
    docs = artifact.documents
    counts = [int(n) for n in docs["n_tokens"].to_pylist()]
    return dict(zip(docs["doc_id"].to_pylist(), _split(artifact.tokens, counts), strict=True))


def _array(table: pa.Table, name: str) -> np.ndarray:
    values = table[name].to_numpy(zero_copy_only=False)
    return values if values.dtype == bool else values.astype(np.float64)


def _quantiles(diff: np.ndarray) -> dict[str, float | int]:
    """How many values, how many differ at all, and the median, p99, p99.9 and max of |a - b|."""
    if not diff.size:
        return {"n": 0, "differing": 0, **dict.fromkeys(("median", "p99", "p999", "max"), math.nan)}
    median, p99, p999 = (float(q) for q in np.quantile(diff, [0.5, 0.99, 0.999]))
    counts = {"n": int(diff.size), "differing": int((diff > 0).sum())}
    return {**counts, "median": median, "p99": p99, "p999": p999, "max": float(diff.max())}
