"""Which results make one leaderboard: one artifact identity (fingerprint and contents hash), the
newest result per model and settings, and entry names that tell two entries of one model apart."""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from pipeline.errors import PipelineError
from pipeline.reporting.common import newest
from pipeline.results.scores import SCORE_HINT


def select(df: pl.DataFrame, artifact: str | None = None) -> pl.DataFrame:
    """The leaderboard of one artifact: newest result per (model, settings), sorted by LongPPL.

    An artifact is its fingerprint and its contents hash (results before schema 3 have none: they
    stand apart), so results on other tables under the same name and fingerprint never join its
    board. ``artifact`` is an artifact name, a fingerprint, or a unique prefix of a fingerprint or
    of a contents hash; None picks the artifact of the newest result (a name or fingerprint: its
    newest result's contents). Adds ``entry``: the model name, ``@ctx<N>`` for a context limit, and
    the differing settings in brackets where that still leaves two entries with one name.
    """
    if df.is_empty():
        raise PipelineError(f"no scores to show: {SCORE_HINT}")
    ordered = df.drop("entry", strict=False).sort(["date", "line"], nulls_last=False)
    fingerprint = pick_fingerprint(ordered, artifact)
    rows = ordered.filter(pl.col("fingerprint") == fingerprint)
    contents = pick_contents(rows, artifact)
    rows = rows.filter(pl.col("contents").eq_missing(contents))
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
    by_contents = ordered.filter(pl.col("contents").str.starts_with(key))
    if key and not prefixed and len(set(by_contents["contents"])) == 1:
        return by_contents["fingerprint"][-1]
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


def pick_contents(rows: pl.DataFrame, artifact: str | None) -> str | None:
    """The contents hash that ``artifact`` names among one fingerprint's results (a unique prefix of
    one), else that of the newest of them."""
    key = str(artifact or "")
    named = sorted({c for c in rows["contents"].drop_nulls() if key and c.startswith(key)})
    return named[0] if len(named) == 1 else rows["contents"][-1]


def other_contents(df: pl.DataFrame, board: pl.DataFrame) -> str | None:
    """A note when results under the board's fingerprint were scored on other tables (not shown)."""
    top = newest(board)
    same = df.filter(pl.col("fingerprint") == top["fingerprint"])
    others = same.filter(~pl.col("contents").eq_missing(top["contents"]))
    if others.is_empty():
        return None
    hashes = ", ".join(sorted({(c or "unrecorded")[:12] for c in others["contents"]}))
    return (
        f"note: {others.height} results under fingerprint {top['fingerprint'][:12]} were scored on other "
        f"contents ({hashes}; results before schema 3 record none) and are not shown: pass "
        "artifact=<contents prefix> to show them"
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
