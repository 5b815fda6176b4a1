"""The leaderboard (`make leaderboard`): tables and a plot of the score runs of one artifact.

Reads the results file (``pipeline.results.scores``). One artifact is shown at a time (default: the one of
the newest result); within it, a model scored several times with the same settings keeps its newest
result. Writes, byte-identical for the same inputs:

``leaderboard.md`` / ``leaderboard.csv`` / ``leaderboard.png``
    one row per entry, sorted by LongPPL ascending (entries without key tokens last, ties by name);
    the PNG plots PPL against LongPPL.
``correlations.md`` / ``correlations.csv`` / ``scatter-<benchmark>.png`` (with ``benchmarks=<csv>``)
    see ``pipeline.reporting.correlations``.

lm-eval results files with LongPPL tasks (`make lm-eval`, ``pipeline.results.lmeval``; ``lm-eval/``
beside the scores file, or ``lmeval_results=<files or folders>``) are read too, so runs made either
way mix on one leaderboard.

Models with a forgetting curve (``forgetting.jsonl`` beside the scores file, or
``forgetting_results=<file>``) get their fine and coarse memory lengths as two more columns.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pydantic.dataclasses

from pipeline.cli import hydra_main
from pipeline.errors import PipelineError
from pipeline.files import write_bytes_atomic
from pipeline.provenance import file_sha256
from pipeline.reporting import correlations
from pipeline.reporting.common import (
    csv_text,
    display_path,
    figure,
    fmt,
    labelled_scatter,
    md_code,
    md_table,
    newest,
    png,
)
from pipeline.results import forgetting as forgetting_results
from pipeline.results.lmeval import read_lmeval_results
from pipeline.results.scores import SCORE_HINT, read_scores
from pipeline.settings import Text, parse

# The leaderboard's columns: CSV name -> Markdown header (None: CSV only).
COLUMNS: dict[str, str | None] = {
    "rank": "#",
    "model": "model",
    "longppl": "LongPPL",
    "ppl": "PPL",
    "longppl_soft": "LongPPL-soft",
    "bpb": "bits/byte",  # tokenizer-independent (pipeline.score.bpb); n/a on results before schema 2
    "key_bpb": "key bits/byte",
    "n_key_tokens": "key tokens",
    "n_tokens": "tokens",
    "key_char_coverage": "key-char coverage",
    "context_limit": None,
    "model_name": None,
    "artifact": None,
    "fingerprint": None,
    "date": None,
    "result_id": None,
}
# Forgetting-curve columns, shown when an entry's model at full context has a forgetting curve.
MEMORY_COLUMNS: dict[str, str | None] = {
    "fine_memory": "fine memory",
    "coarse_memory": "coarse memory",
    "fine_memory_censored": None,
    "coarse_memory_censored": None,
    "forgetting_result_id": None,
}
FORGETTING_NOTE = (
    "Fine/coarse memory: forgetting-curve lengths in tokens (`make forgetting-curve`, newest run per "
    "model; `>`: still met at the largest length measured).\n"
)


# ----------------------------------------------------------------------------------------------
# Selection


def select(df: pl.DataFrame, artifact: str | None = None) -> pl.DataFrame:
    """The leaderboard of one artifact: newest result per (model, settings), sorted by LongPPL.

    ``artifact`` is an artifact name, a fingerprint or a unique fingerprint prefix; None picks the
    artifact of the newest result. Adds ``entry``: the model name, ``@ctx<N>`` for a context limit,
    and the differing settings in brackets where that still leaves two entries with one name.
    """
    if df.is_empty():
        raise PipelineError(f"no scores to show: {SCORE_HINT}")
    ordered = df.drop("entry", strict=False).sort(["date", "line"], nulls_last=False)
    fingerprint = pick_fingerprint(ordered, artifact)
    rows = ordered.filter(pl.col("fingerprint") == fingerprint)
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


# ----------------------------------------------------------------------------------------------
# Outputs


def table(board: pl.DataFrame, memory: dict[str, dict] | None = None) -> list[dict[str, str | None]]:
    """The leaderboard's cells by column (``COLUMNS``, and ``MEMORY_COLUMNS`` when ``memory`` holds an
    entry's model): formatted numbers, None where missing."""
    rows = []
    for i, r in enumerate(board.iter_rows(named=True), start=1):
        cells: dict[str, str | None] = {
            "rank": str(i) if r["longppl"] is not None else "",
            "model": r["entry"],
        }
        cells |= {m: fmt(r[m], missing=None) for m in ("longppl", "ppl", "longppl_soft", "key_char_coverage")}
        cells |= {m: fmt(r[m], missing=None) for m in ("bpb", "key_bpb")}
        cells |= {m: fmt(r[m], "d", missing=None) for m in ("n_key_tokens", "n_tokens", "context_limit")}
        cells |= {k: r[k] for k in ("model_name", "artifact", "fingerprint", "result_id")}
        cells["date"] = r["date"].isoformat() if r["date"] is not None else None
        rows.append(cells | memory_cells(memory_of(r, memory)))
    return rows


def forgetting_memory(path: str | Path | None) -> dict[str, dict]:
    """The ``memory`` record (and ``result_id``) of the newest forgetting curve per model name; {}
    without a forgetting results file."""
    if path is None or not Path(path).is_file():
        return {}
    rows = forgetting_results.newest_per_model(forgetting_results.read_rows(path))
    return {name: {**row["memory"], "result_id": row["result_id"]} for name, row in rows.items()}


def memory_of(r: dict, memory: dict[str, dict] | None) -> dict | None:
    """An entry's memory lengths: only for the model at full context (no ``context_limit``)."""
    return (memory or {}).get(r["model_name"]) if r["context_limit"] is None else None


def memory_cells(m: dict | None) -> dict[str, str | None]:
    if m is None:
        return dict.fromkeys(MEMORY_COLUMNS)
    return {
        "fine_memory": str(m["fine"]),
        "coarse_memory": str(m["coarse"]),
        "fine_memory_censored": str(m["fine_censored"]).lower(),
        "coarse_memory_censored": str(m["coarse_censored"]).lower(),
        "forgetting_result_id": m["result_id"],
    }


def columns(board: pl.DataFrame, memory: dict[str, dict] | None) -> dict[str, str | None]:
    shown = any(memory_of(r, memory) for r in board.iter_rows(named=True))
    return COLUMNS | MEMORY_COLUMNS if shown else COLUMNS


def leaderboard_markdown(
    board: pl.DataFrame, source: str | Path | None = None, memory: dict[str, dict] | None = None
) -> str:
    """The leaderboard as Markdown: a header naming the artifact, then the table."""
    top = newest(board)
    lines = [
        "# LongPPL leaderboard\n\n",
        f"Artifact {md_code(top['artifact'])} (fingerprint {md_code(top['fingerprint'][:12])}), "
        f"{board.height} entries, sorted by LongPPL (lower is better; entries without key tokens last).\n",
    ]
    if source is not None:
        lines.append(f"Scores: {md_code(display_path(source))} (sha256 `{file_sha256(source)}`).\n")
    shown = {k: v for k, v in columns(board, memory).items() if v is not None}
    if "fine_memory" in shown:
        lines.append(FORGETTING_NOTE)
    rows = [[markdown_cell(row, k) for k in shown] for row in table(board, memory)]
    notes = sorted(set(board["unavailable"].drop_nulls().to_list())) if "unavailable" in board.columns else []
    return (
        "".join(lines) + "\n" + md_table(list(shown.values()), rows) + "".join(f"\nn/a: {n}\n" for n in notes)
    )


def markdown_cell(row: dict[str, str | None], key: str) -> str:
    """A cell as the Markdown table shows it: ``n/a`` for a missing number, ``>`` before a memory
    length still met at the largest length measured."""
    if key in MEMORY_COLUMNS:
        censored = row.get(f"{key}_censored") == "true"
        return "" if row[key] is None else (">" if censored else "") + row[key]
    return "n/a" if row[key] is None else row[key]


def leaderboard_csv(board: pl.DataFrame, memory: dict[str, dict] | None = None) -> str:
    """The leaderboard rows as CSV, floats with a fixed number of decimals, missing values empty."""
    names = list(columns(board, memory))
    return csv_text(names, [[row[k] for k in names] for row in table(board, memory)])


def leaderboard_png(board: pl.DataFrame) -> bytes:
    """PPL against LongPPL, one labelled point per entry with a LongPPL."""
    fig = figure()
    ax = fig.add_subplot()
    shown = board.filter(pl.col("longppl").is_not_null() & pl.col("ppl").is_not_null())
    labelled_scatter(ax, shown["ppl"].to_list(), shown["longppl"].to_list(), shown["entry"].to_list())
    if shown.is_empty():
        ax.text(0.5, 0.5, "no entry has both PPL and LongPPL", ha="center", transform=ax.transAxes)
    ax.set_xlabel("PPL")
    ax.set_ylabel("LongPPL")
    ax.set_title(f"{newest(board)['artifact']}", fontsize=9)
    fig.tight_layout()
    return png(fig)


def render(
    df: pl.DataFrame,
    out_dir: str | Path,
    benchmarks_csv: str | Path | None = None,
    *,
    artifact: str | None = None,
    source: str | Path | None = None,
    forgetting: str | Path | None = None,
) -> dict[str, Path]:
    """Write the leaderboard (and correlations, given a benchmarks CSV) into ``out_dir``.

    ``df`` is ``read_scores`` output (selection applied here) or ``select`` output; ``source`` is the
    scores file, whose sha256 the Markdown records; ``forgetting`` the forgetting-curve results
    (memory columns for the models in it). Everything is computed before anything is written;
    correlation files of an earlier run that this one does not produce are removed. Returns
    {file name: path}.
    """
    board = select(df, artifact)
    memory = forgetting_memory(forgetting)
    files = {
        "leaderboard.md": leaderboard_markdown(board, source, memory).encode(),
        "leaderboard.csv": leaderboard_csv(board, memory).encode(),
        "leaderboard.png": leaderboard_png(board),
    }
    if benchmarks_csv is not None:
        files.update(correlations.files(board, benchmarks_csv))
    out = Path(out_dir)
    correlations.remove_stale(out, set(files))
    paths = {}
    for name, data in files.items():
        write_bytes_atomic(out / name, data)
        paths[name] = out / name
    return paths


@pydantic.dataclasses.dataclass(frozen=True)
class LeaderboardOptions:
    results: str  # the score stage's results file
    out_dir: str
    artifact: Text | None = None  # artifact name, fingerprint or its prefix; None: the newest result's
    benchmarks: str | None = None  # CSV: `model`, then one numeric column per benchmark
    forgetting_results: str | None = None  # None: forgetting.jsonl beside `results`
    # lm-eval results files or folders (`make lm-eval`); None: the folder lm-eval/ beside `results`
    lmeval_results: str | list[str] | None = None


def run(cfg: Any) -> dict[str, Path]:
    """Load, select, render; print the Markdown leaderboard and the written paths."""
    options = parse(LeaderboardOptions, cfg)
    results = Path(options.results)
    paths = render(
        read_all_results(results, options.lmeval_results),
        Path(options.out_dir),
        None if options.benchmarks is None else Path(options.benchmarks),
        artifact=options.artifact,
        source=results if results.is_file() else None,
        forgetting=options.forgetting_results or results.with_name("forgetting.jsonl"),
    )
    print(paths["leaderboard.md"].read_text(encoding="utf-8"))
    for path in paths.values():
        print(f"wrote {path}")
    return paths


def read_all_results(results: Path, lmeval: str | list[str] | None) -> pl.DataFrame:
    """The score runs of the results file and of lm-eval results files (``make lm-eval``), in one frame;
    prints the lm-eval tasks left out (run on part of their documents)."""
    if lmeval is None:
        lmeval = [str(results.with_name("lm-eval"))] if results.with_name("lm-eval").is_dir() else []
    extra = read_lmeval_results(*([lmeval] if isinstance(lmeval, str) else lmeval))
    for note in extra.skipped:
        print(f"left out {note}")
    if not results.is_file() and not extra.frame.is_empty():
        return extra.frame
    return pl.concat([read_scores(results), extra.frame])


def main() -> None:
    hydra_main("leaderboard", run)


if __name__ == "__main__":
    main()
