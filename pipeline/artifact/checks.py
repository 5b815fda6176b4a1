"""What an artifact's contents must satisfy, checked on every load (``artifacts.load_artifact``).

File hashes prove nothing when whoever edited a table also rewrote the manifest, so the contents
are checked against each other, against the key-token rule and against the fingerprint:

- settings: the ones the readers use have their types (K and d positive integers, alpha and beta
  finite numbers, gamma finite and positive, max_tokens a positive integer or null, add_bos a
  boolean, the evaluator's spec and the corpus name strings).
- documents: at least one; ids unique; ``doc_index`` 0, 1, ...; ``n_chars`` the text's length; the
  text's sha256 (and, when not truncated, its source's); a truncated text shorter than its source,
  with a ``max_tokens`` set; ``n_tokens`` at most ``max_tokens``; the manifest's per-document records
  and the fingerprinted settings' document list equal to the table; the fingerprint equal to
  ``settings_fingerprint(settings, kind)``; every table's row count as the manifest records it.
- tokens (kinds that declare them, ``schema.KINDS``): rows grouped by document in document
  order, as many as ``n_tokens``; ``token_index`` 0, 1, ...; ``0 <= char_start <= char_end <=
  n_chars``; log-probs finite and <= 0 where present; ``lsd = long - short``, ``soft_weight =
  min(exp(lsd), gamma)`` and ``is_key`` the stored thresholds applied to ``lsd`` and
  ``long_logprob``; ``n_key_tokens`` their count; the spans exactly the merge of the key tokens'
  character offsets. Offsets run forward (starts and ends never decrease) and leave only whitespace
  uncovered (``token_checks``); K, d and the BOS convention are the ones the log-probs were computed
  with (``token_checks.check_windows``).
- spans (always): grouped like the tokens, as many as ``n_spans``; ``span_index`` 0, 1, ...;
  inside the text, sorted and disjoint.

A failure is one PipelineError naming the table, the column, the first bad row and its document.
Everything is vectorised (numpy): one pass over each column, whatever the number of documents.
Where the evaluator's tokenizer and the source texts are at hand, ``pipeline.artifact.inputs``
checks more (docs/guarantees.md, "What no check can prove").
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline import definition
from pipeline.artifact import token_checks
from pipeline.artifact.schema import KEY_SPANS, KeyTokenArtifact, declared_tables, settings_fingerprint
from pipeline.artifact.shards import locate_row, recorded_rows, table_files
from pipeline.errors import PipelineError
from pipeline.provenance import text_sha256

# Stored values are recomputed in float64 from the stored inputs: equal up to the last bits.
RELATIVE_TOLERANCE = 1e-9
# A log-probability is at most 0 (a tiny positive rounding from another producer is tolerated).
LOGPROB_MAX = 1e-6
FIX = "the artifact is damaged or was edited: regenerate it with `make keytokens`, or download it again"


class ArtifactProblem(PipelineError):
    """A content check failed."""


@dataclass
class Where:
    """Names the first bad row of a table for the error message."""

    root: Any
    doc_ids: np.ndarray  # per document
    row_docs: dict[str, np.ndarray]  # per table: each row's document number
    manifest: dict[str, Any] | None = None  # names the file (a shard) and its row; None: <table>.parquet

    def fail(self, table: str, column: str, rows: np.ndarray, what: str) -> None:
        """Raise for the first True of ``rows`` (a boolean mask over the table), if any."""
        bad = np.flatnonzero(rows)
        if bad.size:
            row = int(bad[0])
            doc = self.doc_ids[self.row_docs[table][row]] if table in self.row_docs else None
            of = f" (document '{doc}')" if doc is not None else ""
            file, at = (
                (f"{table}.parquet", row) if self.manifest is None else locate_row(self.manifest, table, row)
            )
            raise ArtifactProblem(
                f"artifact {self.root}: {file} row {at}{of}, column {column}: {what}; {FIX}"
            )


def check_artifact(artifact: KeyTokenArtifact) -> None:
    """Every check above, in order; raises ArtifactProblem (a PipelineError) at the first failure."""
    tables = declared_tables(artifact.manifest, artifact.root)
    check_settings(artifact.settings, artifact.kind, artifact.root)
    docs = column_arrays(artifact.documents)
    rows = {"documents": np.arange(len(docs["doc_id"]))}
    where = Where(artifact.root, docs["doc_id"], rows, artifact.manifest)
    check_documents(artifact, docs, where)
    check_manifest_records(artifact, docs, where)
    if "tokens" in tables:
        if artifact.tokens is None:
            raise ArtifactProblem(f"artifact {artifact.root}: its kind declares tokens.parquet; {FIX}")
        tokens = column_arrays(artifact.tokens)
        check_grouping("tokens", "token_index", "n_tokens", tokens, docs, where)
        check_token_values(artifact.settings, tokens, docs, where)
        token_checks.check_offsets(tokens, docs, where)
        token_checks.check_windows(artifact.settings, tokens, docs, where)
    spans = column_arrays(artifact.spans)
    check_grouping("spans", "span_index", "n_spans", spans, docs, where)
    check_spans(spans, docs, where)
    if "tokens" in tables:
        check_spans_are_merged_key_tokens(tokens, spans, docs, where)


def check_settings(settings: dict[str, Any], kind: str, root: Any) -> None:
    """The manifest settings the readers use, by type (a string where a number belongs would reach the
    key-token page and the dataset card)."""
    rules: dict[str, tuple[Any, str]] = {
        "K": (_positive_int, "a positive integer"),
        "d": (_positive_int, "a positive integer"),
        "alpha": (_finite, "a finite number"),
        "beta": (_finite, "a finite number"),
        "gamma": (
            lambda v: (kind == KEY_SPANS and v is None) or (_finite(v) and v > 0),
            "a finite positive number" + (" or null" if kind == KEY_SPANS else ""),
        ),
        "max_tokens": (lambda v: v is None or _positive_int(v), "a positive integer or null"),
        "add_bos": (lambda v: isinstance(v, bool), "true or false"),
    }
    for name, (valid, what) in rules.items():
        if (name in settings or name in ("K", "d", "alpha", "beta", "gamma")) and not valid(
            settings.get(name)
        ):
            raise ArtifactProblem(
                f"artifact {root}: manifest settings.{name}={_short(settings.get(name))} is not {what}; {FIX}"
            )
    for name, key in (("evaluator", "spec"), ("corpus", "name")):
        node = settings.get(name)
        if not isinstance(node, dict) or not isinstance(node.get(key), str):
            raise ArtifactProblem(f"artifact {root}: manifest settings.{name}.{key} is not a string; {FIX}")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def column_arrays(table: pa.Table) -> dict[str, np.ndarray]:
    """Each column as a numpy array: floats with NaN for null, strings as objects."""
    out = {}
    for name in table.column_names:
        column = table[name]
        if pa.types.is_floating(column.type):
            out[name] = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)
            out[name + ":null"] = np.asarray(column.is_null().to_numpy(zero_copy_only=False))
        elif pa.types.is_integer(column.type):
            out[name] = np.asarray(column.fill_null(-1).to_numpy(), dtype=np.int64)
        else:
            out[name] = np.asarray(column.to_numpy(zero_copy_only=False))
    return out


def check_documents(artifact: KeyTokenArtifact, docs: dict[str, np.ndarray], where: Where) -> None:
    n = len(docs["doc_id"])
    if n == 0:
        raise ArtifactProblem(f"artifact {artifact.root} has no documents; {FIX}")
    ids = docs["doc_id"]
    where.fail("documents", "doc_id", np.array([not isinstance(x, str) or not x for x in ids]), "empty")
    first = {}
    duplicate = np.array([first.setdefault(x, i) != i for i, x in enumerate(ids)])
    where.fail("documents", "doc_id", duplicate, "duplicate document id (ids must be unique)")
    where.fail("documents", "doc_index", docs["doc_index"] != np.arange(n), "not the row number")
    lengths = np.array([len(t) if isinstance(t, str) else -1 for t in docs["text"]])
    where.fail("documents", "n_chars", docs["n_chars"] != lengths, "is not the text's length")
    for name in ("n_tokens", "n_spans", "n_key_tokens"):
        where.fail("documents", name, docs[name] < 0, "negative")
    hashes = np.array([text_sha256(t) for t in docs["text"]], dtype=object)
    where.fail("documents", "sha256", hashes != docs["sha256"], "does not match the text")
    truncated = docs["truncated"].astype(bool)
    where.fail(
        "documents",
        "source_sha256",
        ~truncated & ((hashes != docs["source_sha256"]) | (docs["n_source_chars"] != lengths)),
        "an untruncated text must be its source text",
    )
    check_truncation(artifact.settings.get("max_tokens"), docs, truncated, where)


def check_truncation(
    max_tokens: int | None, docs: dict[str, np.ndarray], truncated: np.ndarray, where: Where
) -> None:
    """A truncated text is a strict prefix of its source, cut at ``max_tokens``; no text has more."""
    where.fail(
        "documents",
        "truncated",
        truncated & (docs["n_chars"] >= docs["n_source_chars"]),
        "true, but the text is as long as its source (n_chars >= n_source_chars): it was not truncated",
    )
    if max_tokens is None:
        where.fail("documents", "truncated", truncated, "true, but the settings set no max_tokens")
    else:
        where.fail(
            "documents", "n_tokens", docs["n_tokens"] > max_tokens, f"more than max_tokens={max_tokens}"
        )


def check_manifest_records(artifact: KeyTokenArtifact, docs: dict[str, np.ndarray], where: Where) -> None:
    """The manifest's per-document records, the fingerprinted settings and the file row counts."""
    manifest, root = artifact.manifest, artifact.root
    records = {
        "documents": (manifest.get("documents"), ("doc_id", "sha256", "source_sha256", "n_tokens")),
        "settings.documents": (artifact.settings.get("documents"), ("doc_id", "source_sha256")),
    }
    for label, (listed, keys) in records.items():
        listed = listed if isinstance(listed, list) else []
        for key in keys:
            table = [str(x) if key != "n_tokens" else int(x) for x in docs[key]]
            found = [r.get(key) if isinstance(r, dict) else None for r in listed]
            if found != table:
                row = next(
                    (i for i, (a, b) in enumerate(zip(found, table, strict=False)) if a != b),
                    min(len(found), len(table)),
                )
                doc = f" (document '{docs['doc_id'][row]}')" if row < len(table) else ""
                raise ArtifactProblem(
                    f"artifact {root}: manifest {label}[{row}].{key} disagrees with documents.parquet{doc} "
                    f"({len(found)} records, {len(table)} documents); {FIX}"
                )
    if manifest["fingerprint"] != settings_fingerprint(artifact.settings, artifact.kind):
        raise ArtifactProblem(
            f"artifact {root}: the manifest's fingerprint is not that of its settings; {FIX}"
        )
    for name in declared_tables(manifest, root):
        rows = getattr(artifact, name).num_rows
        if recorded_rows(manifest, name) != rows:
            files = table_files(manifest, name)
            label = files[0] if len(files) == 1 else f"the {len(files)} shards of {name}"
            raise ArtifactProblem(
                f"artifact {root}: {label} has {rows} rows, not as its manifest says; {FIX}"
            )


def check_grouping(
    table: str, index: str, count: str, rows: dict[str, np.ndarray], docs: dict[str, np.ndarray], where: Where
) -> None:
    """Rows grouped by document, in document order, ``docs[count]`` of each, numbered 0, 1, ..."""
    ids, counts = docs["doc_id"], docs[count]
    found = Counter(rows["doc_id"].tolist())
    for i, doc_id in enumerate(ids):
        if found.get(doc_id, 0) != counts[i]:
            raise ArtifactProblem(
                f"artifact {where.root}: document '{doc_id}' has {found.get(doc_id, 0)} rows in "
                f"{table}.parquet but documents.{count} says {counts[i]}; {FIX}"
            )
    expected = np.repeat(np.arange(len(ids)), counts)
    where.row_docs[table] = expected
    if len(expected) != len(rows["doc_id"]):
        unknown = sorted(set(found) - set(ids.tolist()))[:1]
        raise ArtifactProblem(
            f"artifact {where.root}: {table}.parquet has rows of document {unknown!r}, which "
            f"documents.parquet does not list; {FIX}"
        )
    where.fail(table, "doc_id", rows["doc_id"] != ids[expected], "rows are not grouped in document order")
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    where.fail(table, index, rows[index] != np.arange(len(expected)) - starts, "not numbered 0, 1, ...")


def check_token_values(
    settings: dict[str, Any], tokens: dict[str, np.ndarray], docs: dict[str, np.ndarray], where: Where
) -> None:
    """Offsets inside the text, finite log-probs, and LSD, soft weight and key flag as defined."""
    alpha, beta, gamma = (settings[k] for k in ("alpha", "beta", "gamma"))
    n_chars = docs["n_chars"][where.row_docs["tokens"]]
    start, end = tokens["char_start"], tokens["char_end"]
    where.fail("tokens", "char_start", (start < 0) | (start > end), "not 0 <= char_start <= char_end")
    where.fail("tokens", "char_end", end > n_chars, "past the end of the text")
    values = {
        k: (tokens[k], ~tokens[k + ":null"]) for k in ("long_logprob", "short_logprob", "lsd", "soft_weight")
    }
    for name, (x, present) in values.items():
        where.fail("tokens", name, present & ~np.isfinite(x), f"not a finite number ({_first(x, present)})")
    for name in ("long_logprob", "short_logprob"):
        x, present = values[name]
        where.fail("tokens", name, present & (x > LOGPROB_MAX), "a log-probability above 0")
    (long, has_long), (short, has_short) = values["long_logprob"], values["short_logprob"]
    (lsd, has_lsd), (weight, has_weight) = values["lsd"], values["soft_weight"]
    where.fail("tokens", "lsd", has_lsd != (has_long & has_short), "present exactly where both log-probs are")
    where.fail("tokens", "lsd", has_lsd & ~_close(lsd, long - short), "not long_logprob - short_logprob")
    where.fail("tokens", "soft_weight", has_weight != has_lsd, "present exactly where lsd is")
    expected = definition.soft_weight(np.where(has_lsd, lsd, 0.0), gamma)
    where.fail(
        "tokens", "soft_weight", has_weight & ~_close(weight, expected), f"not min(exp(lsd), gamma={gamma})"
    )
    key = definition.is_key(np.where(has_lsd, lsd, np.nan), long, alpha, beta)
    where.fail(
        "tokens", "is_key", tokens["is_key"] != key, f"not lsd > alpha={alpha} and long_logprob > beta={beta}"
    )
    per_doc = np.bincount(where.row_docs["tokens"], weights=key, minlength=len(docs["doc_id"]))
    where.fail("documents", "n_key_tokens", docs["n_key_tokens"] != per_doc, "not the number of key tokens")


def check_spans(spans: dict[str, np.ndarray], docs: dict[str, np.ndarray], where: Where) -> None:
    """Spans inside their text, sorted and disjoint within each document."""
    doc = where.row_docs["spans"]
    start, end = spans["char_start"], spans["char_end"]
    where.fail("spans", "char_start", (start < 0) | (start > end), "not 0 <= char_start <= char_end")
    where.fail("spans", "char_end", end > docs["n_chars"][doc], "past the end of the text")
    same_doc = np.zeros(len(start), dtype=bool)
    same_doc[1:] = doc[1:] == doc[:-1]
    previous_end = np.concatenate([[0], end[:-1]])
    where.fail("spans", "char_start", same_doc & (start < previous_end), "spans are not sorted and disjoint")


def check_spans_are_merged_key_tokens(
    tokens: dict[str, np.ndarray], spans: dict[str, np.ndarray], docs: dict[str, np.ndarray], where: Where
) -> None:
    """The spans are the key tokens' offsets merged (``definition.merge_spans``), per document: the
    documents are laid end to end with a gap, so that one merge over all of them never joins two."""
    base = np.concatenate([[0], np.cumsum(docs["n_chars"] + 1)[:-1]])
    key = tokens["is_key"].astype(bool)
    shift = base[where.row_docs["tokens"]][key]
    starts, ends, counts = definition.merge_spans(
        tokens["char_start"][key] + shift, tokens["char_end"][key] + shift
    )
    stored_shift = base[where.row_docs["spans"]]
    stored = (spans["char_start"] + stored_shift, spans["char_end"] + stored_shift, spans["n_tokens"])
    n = min(len(starts), len(stored[0]))
    merged = (starts, ends, counts)
    for column, mine, theirs in zip(("char_start", "char_end", "n_tokens"), merged, stored, strict=True):
        where.fail("spans", column, mine[:n] != theirs[:n], "not the merge of the key tokens' offsets")
    if len(starts) != len(stored[0]):
        raise ArtifactProblem(
            f"artifact {where.root}: spans.parquet has {len(stored[0])} spans, the key tokens merge into "
            f"{len(starts)}; {FIX}"
        )


def _close(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.abs(a - b) <= RELATIVE_TOLERANCE * np.maximum(1.0, np.abs(b))


def _first(x: np.ndarray, present: np.ndarray) -> str:
    bad = np.flatnonzero(present & ~np.isfinite(x))
    return repr(float(x[bad[0]])) if bad.size else ""
