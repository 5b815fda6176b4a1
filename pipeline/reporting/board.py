"""Which results make one leaderboard: one artifact (the same artifact, ``results.scores.same_artifact``:
its fingerprint and identity, or its exact contents for results before schema 4), only runs on all of
its documents, the newest result per entry (name, model identity and settings: ``results.keys``), and
entry names that tell two entries of one name apart."""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from pipeline.errors import PipelineError
from pipeline.provenance import json_sha256
from pipeline.reporting.common import newest
from pipeline.results.keys import context_name
from pipeline.results.scores import SCORE_HINT, same_artifact

ENTRY_KEY = ["name", "model", "settings"]  # what one entry is: its name, the model's identity, the settings


def select(df: pl.DataFrame, artifact: str | None = None) -> pl.DataFrame:
    """The leaderboard of one artifact: newest result per entry, sorted by LongPPL.

    An artifact is its fingerprint and its identity as the same artifact (``same_artifact``: the same
    discrete contents and values within the measured tolerance, so a regeneration on another machine
    joins the board; results before schema 4 match only their exact contents hash), so results on other
    tables under the same name and fingerprint never join its board. ``artifact`` is an artifact name, a
    fingerprint, or a unique prefix of a fingerprint, a discrete hash or a contents hash; None picks the
    artifact of the newest result (a name or fingerprint: its newest result's). A run on part of the
    artifact's documents (``partial``) is never an entry (``partial_notes`` says which were left out).
    An entry is one name (with one ``@ctx<N>``: ``keys.context_name``), one model (its identity: weights,
    tokenizer, Hub commit, not its name or path) and one set of settings; its newest result is shown.
    Adds ``entry``: the name, and in brackets the settings (and ``model=<hash>``) that differ where that
    still leaves two entries with one name.
    """
    if df.is_empty():
        raise PipelineError(f"no scores to show: {SCORE_HINT}")
    df = with_keys(df)
    whole = df.filter(pl.col("partial").is_null())
    if whole.is_empty():
        raise PipelineError(
            "no scores to show: every result was scored on part of its artifact's documents "
            f"({df['partial'][-1]}), which is no leaderboard entry: score all of them"
        )
    ordered = whole.drop("entry", "name", strict=False).sort(["date", "line"], nulls_last=False)
    names = [context_name(m, c) for m, c in zip(ordered["model_name"], ordered["context_limit"], strict=True)]
    ordered = ordered.with_columns(pl.Series("name", names, dtype=pl.String))
    fingerprint = pick_fingerprint(ordered, artifact)
    rows = ordered.filter(pl.col("fingerprint") == fingerprint)
    reference = pick_reference(rows, artifact)
    rows = rows.filter(pl.Series([same_artifact(r, reference) for r in rows.iter_rows(named=True)]))
    rows = rows.unique(subset=ENTRY_KEY, keep="last", maintain_order=True)
    rows = rows.with_columns(pl.Series("entry", entry_names(rows), dtype=pl.String))
    shown = [c for c in ordered.columns if c != "name"]
    return rows.select("entry", *shown).sort(["longppl", "entry"], nulls_last=True)


def with_keys(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with the columns an entry's key reads (``model``, ``partial``), null where a frame made
    before them lacks them."""
    missing = [pl.lit(None, dtype=pl.String).alias(c) for c in ("model", "partial") if c not in df.columns]
    return df.with_columns(missing) if missing else df


def partial_notes(df: pl.DataFrame) -> list[str]:
    """One line per result left off every board because it scored part of its artifact's documents."""
    rows = with_keys(df).filter(pl.col("partial").is_not_null()).sort(["date", "line"], nulls_last=False)
    return [
        f"left out {'line ' + str(r['line']) if r['line'] is not None else 'a result'} ({r['model_name']}, "
        f"artifact {r['artifact']}): scored on {r['partial']}, a partial run is no leaderboard entry"
        for r in rows.iter_rows(named=True)
    ]


def pick_fingerprint(ordered: pl.DataFrame, artifact: str | None) -> str:
    """The fingerprint that ``artifact`` (name, fingerprint or prefix; None: newest) names."""
    if artifact is None:
        return ordered["fingerprint"][-1]
    key = str(artifact)
    named = ordered.filter(pl.col("artifact") == key)
    if not named.is_empty():
        return named["fingerprint"][-1]
    prefixed = sorted(set(ordered.filter(pl.col("fingerprint").str.starts_with(key))["fingerprint"]))
    by_hash = ordered.filter(hash_prefix(key))
    if key and not prefixed and len(set(by_hash["fingerprint"])) == 1:
        return by_hash["fingerprint"][-1]
    if key and len(prefixed) == 1:
        return prefixed[0]
    known = ordered.unique(subset=["fingerprint"], keep="last", maintain_order=True)
    listing = ", ".join(
        f"{n} ({f[:12]})" for n, f in zip(known["artifact"], known["fingerprint"], strict=True)
    )
    problem = "is ambiguous" if len(prefixed) > 1 else "matches no scored artifact"
    raise PipelineError(
        f"artifact={key!r} {problem}; scored artifacts: {listing}: pass artifact=<name or fingerprint>"
    )


def hash_prefix(key: str) -> pl.Expr:
    """Rows whose contents hash or discrete hash starts with ``key``."""
    discrete = pl.col("identity").str.json_path_match("$.discrete")
    return pl.col("contents").str.starts_with(key).fill_null(False) | discrete.str.starts_with(key).fill_null(
        False
    )


def pick_reference(rows: pl.DataFrame, artifact: str | None) -> dict[str, Any]:
    """The result whose artifact the board shows, among one fingerprint's results: the newest of those
    whose contents or discrete hash ``artifact`` prefixes, else the newest."""
    key = str(artifact or "")
    named = rows.filter(hash_prefix(key)) if key else rows.clear()
    return (named if not named.is_empty() else rows).row(-1, named=True)


def other_contents(df: pl.DataFrame, board: pl.DataFrame) -> str | None:
    """A note when results under the board's fingerprint were scored on another artifact (not shown)."""
    top = newest(board)
    same = df.filter(pl.col("fingerprint") == top["fingerprint"])
    others = same.filter(
        pl.Series([not same_artifact(r, top) for r in same.iter_rows(named=True)], dtype=pl.Boolean)
    )
    if others.is_empty():
        return None
    hashes = ", ".join(sorted({(c or "unrecorded")[:12] for c in others["contents"]}))
    return (
        f"note: {others.height} results under fingerprint {top['fingerprint'][:12]} were scored on another "
        f"artifact (contents {hashes}; other key tokens, or values beyond the tolerance; results before "
        "schema 3 record none) and are not shown: pass artifact=<contents prefix> to show them"
    )


def entry_names(rows: pl.DataFrame) -> list[str]:
    """Model names (one ``@ctx<N>``), with the settings, and ``model=<hash>`` of the model's identity,
    that tell apart two entries of one name."""
    base = [context_name(m, c) for m, c in zip(rows["model_name"], rows["context_limit"], strict=True)]
    settings = [json.loads(s) for s in rows["settings"]]
    models = [json_sha256(m)[:12] if m is not None else "unrecorded" for m in rows["model"]]
    for i, model in enumerate(models):
        settings[i]["model"] = model
    names = list(base)
    for label in sorted(set(base)):
        group = [i for i, b in enumerate(base) if b == label]
        if len(group) < 2:
            continue
        keys = sorted({k for i in group for k in settings[i]})
        differ = [k for k in keys if len({_setting_text(settings[i].get(k)) for i in group}) > 1]
        for i in group:
            names[i] = f"{label}[{','.join(f'{k}={_setting_text(settings[i].get(k))}' for k in differ)}]"
    return names


def _setting_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
