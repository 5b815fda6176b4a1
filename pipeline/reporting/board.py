"""Which results make one leaderboard: one artifact (the same artifact, ``results.scores.same_artifact``:
its fingerprint and identity, or its exact contents for results before schema 4), the newest result per
model and settings, and entry names that tell two entries of one model apart."""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from pipeline.errors import PipelineError
from pipeline.reporting.common import newest
from pipeline.results.scores import SCORE_HINT, same_artifact


def select(df: pl.DataFrame, artifact: str | None = None) -> pl.DataFrame:
    """The leaderboard of one artifact: newest result per (model, settings), sorted by LongPPL.

    An artifact is its fingerprint and its identity as the same artifact (``same_artifact``: the same
    discrete contents and values within the measured tolerance, so a regeneration on another machine
    joins the board; results before schema 4 match only their exact contents hash), so results on other
    tables under the same name and fingerprint never join its board. ``artifact`` is an artifact name, a
    fingerprint, or a unique prefix of a fingerprint, a discrete hash or a contents hash; None picks the
    artifact of the newest result (a name or fingerprint: its newest result's). Adds ``entry``: the
    model name, ``@ctx<N>`` for a context limit, and the differing settings in brackets where that still
    leaves two entries with one name.
    """
    if df.is_empty():
        raise PipelineError(f"no scores to show: {SCORE_HINT}")
    ordered = df.drop("entry", strict=False).sort(["date", "line"], nulls_last=False)
    fingerprint = pick_fingerprint(ordered, artifact)
    rows = ordered.filter(pl.col("fingerprint") == fingerprint)
    reference = pick_reference(rows, artifact)
    rows = rows.filter(pl.Series([same_artifact(r, reference) for r in rows.iter_rows(named=True)]))
    rows = rows.unique(subset=["model_name", "settings"], keep="last", maintain_order=True)
    rows = rows.with_columns(pl.Series("entry", entry_names(rows), dtype=pl.String))
    return rows.select("entry", *ordered.columns).sort(["longppl", "entry"], nulls_last=True)


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
    """Model names, with the settings that tell apart two entries of one name."""
    base = [
        m if c is None else f"{m}@ctx{c}"
        for m, c in zip(rows["model_name"], rows["context_limit"], strict=True)
    ]
    settings = [json.loads(s) for s in rows["settings"]]
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
