"""Which results make one leaderboard: one artifact (the same artifact, ``results.scores.same_artifact``:
its fingerprint and identity, or its exact contents for results before schema 4), only runs on all of
its documents, the newest result per entry (name, model identity and settings: ``results.keys``; an
entry whose results differ beyond ``CONFLICT_TOLERANCE`` is a conflict, shown as one), and entry names
that tell two entries of one name apart."""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from pipeline.errors import PipelineError
from pipeline.metric_registry import RANKED_BY, metrics
from pipeline.provenance import json_sha256
from pipeline.results.keys import context_name
from pipeline.results.score import SCORE_HINT, same_artifact

ENTRY_KEY = ["name", "model", "settings"]  # what one entry is: its name, the model's identity, the settings
# Two results of one entry on the same artifact whose numbers differ by more than this (relative; the
# refreshes' tolerance, conf/refresh/embedded.yaml) are a conflict: one of them is not what it claims.
CONFLICT_TOLERANCE = 1e-4
COUNTS = ("n_tokens", "n_key_tokens")  # compared exactly


def select(df: pl.DataFrame, artifact: str | None = None) -> pl.DataFrame:
    """The leaderboard of one artifact: newest result per entry, sorted by LongPPL
    (``metric_registry.RANKED_BY``).

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
    rows = mark_conflicts(rows).unique(subset=ENTRY_KEY, keep="last", maintain_order=True)
    rows = rows.with_columns(pl.Series("entry", entry_names(rows), dtype=pl.String))
    shown = [c for c in ordered.columns if c != "name"]
    return rows.select("entry", *shown).sort([RANKED_BY, "entry"], nulls_last=True)


def mark_conflicts(rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` (in date order) with each entry whose results differ beyond ``CONFLICT_TOLERANCE``
    marked on its newest result: its metrics null (no rank, no value taken from either) and
    ``unavailable`` saying which results differ in what, so the board shows the conflict."""
    groups: dict[tuple, list[int]] = {}
    for i, key in enumerate(rows.select(ENTRY_KEY).iter_rows()):
        groups.setdefault(key, []).append(i)
    notes = {}
    for key, members in groups.items():
        found = [rows.row(i, named=True) for i in members]
        differ = [(r, d) for r in found[:-1] if (d := number_differences(r, found[-1]))]
        if differ:
            listed = "; ".join(f"{result_label(r)}: {d}" for r, d in differ[:3])
            notes[members[-1]] = (
                f"conflict: {key[0]} has {len(differ) + 1} results of one model, artifact and settings that "
                f"differ beyond {CONFLICT_TOLERANCE:g} (newest {result_label(found[-1])}; {listed}): "
                "compare the artifacts they were scored on (make compare-artifacts), delete the wrong lines"
            )
    if not notes:
        return rows
    marked = pl.Series([i in notes for i in range(rows.height)])
    note = pl.Series([notes.get(i) for i in range(rows.height)], dtype=pl.String)
    nulled = [pl.when(marked).then(None).otherwise(pl.col(m.name)).alias(m.name) for m in metrics()]
    return rows.with_columns(
        *nulled, pl.when(marked).then(note).otherwise(pl.col("unavailable")).alias("unavailable")
    )


def number_differences(a: dict[str, Any], b: dict[str, Any]) -> str:
    """What differs between two results' numbers (``a``'s against ``b``'s), or empty; a number either
    lacks (a result before bits per byte) is not compared."""
    out = []
    for column in (*(m.name for m in metrics()), *COUNTS):
        x, y = a.get(column), b.get(column)
        if x is None or y is None:
            continue
        if (x != y) if column in COUNTS else not abs(x - y) <= CONFLICT_TOLERANCE * abs(y):
            out.append(f"{column} {x} against {y}")
    return ", ".join(out)


def result_label(row: dict[str, Any]) -> str:
    where = f"line {row['line']}" if row.get("line") is not None else "an lm-eval result"
    return f"{where}, result {row.get('result_id')}"


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


def newest(board: pl.DataFrame) -> dict[str, Any]:
    """The newest row of a leaderboard frame (by date, then line)."""
    return board.sort(["date", "line"], nulls_last=False).row(-1, named=True)
