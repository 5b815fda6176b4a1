"""The leaderboard (`make leaderboard`): tables and a plot of the score runs of one artifact.

Reads the results file (``pipeline.results.score``). One artifact is shown at a time (default: the one of
the newest result); within it, a model scored several times with the same settings keeps its newest
result. Writes, byte-identical for the same inputs:

``leaderboard.md`` / ``leaderboard.csv`` / ``leaderboard.png``
    one row per entry, sorted by LongPPL ascending (entries without key tokens last, ties by name);
    the PNG plots PPL against LongPPL.
``correlations.md`` / ``correlations.csv`` / ``scatter-<benchmark>.png`` (with ``benchmarks=<csv>``)
    see ``pipeline.reporting.correlations``.
``loogle.md`` / ``loogle.csv`` (with ``loogle.jsonl`` beside the scores file)
    the LooGLE table, beside LongPPL: see ``pipeline.reporting.loogle``.

lm-eval results files with LongPPL tasks (`make lm-eval`, ``pipeline.results.lmeval``; ``lm-eval/``
beside the scores file, or ``lmeval_results=<files or folders>``) are read too, so runs made either
way mix on one leaderboard.

Models with a forgetting curve (``forgetting.jsonl`` beside the scores file, or
``forgetting_results=<file>``) get their fine and coarse memory lengths as two more columns; models
with a context ladder on the artifact (``ladder.jsonl``, or ``ladder_results=<file>``) their effective
context length and its interval, and ``ladder.png`` their ladders.

``out_dir`` is a folder the command made (``BOARD_FOLDER``: it holds ``.longppl-leaderboard``; a new
or empty folder is made one), checked before anything is read (``pipeline.outputs``): it rewrites and
removes its files by name, and a CSV cannot carry a mark of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pydantic.dataclasses

from pipeline.files import write_bytes_atomic
from pipeline.marks import marked_folder
from pipeline.metric_registry import RANKED_BY, metrics
from pipeline.outputs import Output, check, make_folder
from pipeline.provenance import file_sha256
from pipeline.reporting import correlations
from pipeline.reporting import ladder as ladder_plot
from pipeline.reporting import loogle as loogle_board
from pipeline.reporting.common import (
    csv_text,
    display_path,
    figure,
    fmt,
    labelled_scatter,
    md_code,
    md_table,
    md_text,
    plot_text,
    png,
)
from pipeline.results import forgetting as forgetting_results
from pipeline.results import ladder as ladder_results
from pipeline.results.entries import newest, other_contents, partial_notes, select
from pipeline.results.keys import score_key
from pipeline.results.lmeval import read_lmeval_results
from pipeline.results.score import read_scores
from pipeline.settings import Text

BOARD_FOLDER = marked_folder(
    "leaderboard", older="if it is a leaderboard written before its folders were marked, delete it"
)

# The leaderboard's columns: CSV name -> Markdown header (None: CSV only). ``board_columns``: the entry,
# every metric of the registry (the one it ranks by first; bits per byte n/a on results before schema
# 2), then the others.
ENTRY_COLUMNS: dict[str, str | None] = {"rank": "#", "model": "model"}
COLUMNS: dict[str, str | None] = {
    "n_key_tokens": "key tokens",
    "n_tokens": "tokens",
    "key_char_coverage": "key-char coverage",
    "context_limit": None,
    "model_name": None,
    "artifact": None,
    "fingerprint": None,
    "contents": None,
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
# Context-ladder columns, shown when an entry's model at full context has a ladder on the artifact.
LADDER_COLUMNS: dict[str, str | None] = {
    "effective_length": "effective length",
    "effective_interval": "interval",
    "effective_length_censored": None,  # right: not within tolerance below full context; left: lowest rung
    "effective_tolerance": None,
    "ladder_result_id": None,
}
LADDER_NOTE = (
    "Effective length: the shortest context limit whose LongPPL stays within the tolerance of the "
    "full-context LongPPL (`make ladder`, newest run per model on this artifact; interval: bootstrap over "
    "documents; `>`: not within it below full context).\n"
)
FORGETTING_NOTE = (
    "Fine/coarse memory: forgetting-curve lengths in tokens (`make forgetting-curve`, newest run per "
    "model; `>`: still met at the largest length measured).\n"
)


# ----------------------------------------------------------------------------------------------
# Outputs


def board_columns() -> dict[str, str | None]:
    """The entry's columns, every metric of the registry (its label the header), then ``COLUMNS``."""
    ranked = sorted(metrics(), key=lambda m: m.name != RANKED_BY)  # stable: the registry's order after it
    return ENTRY_COLUMNS | {m.name: m.label for m in ranked} | COLUMNS


def table(
    board: pl.DataFrame, memory: dict[str, dict] | None = None, ladder: dict[str, dict] | None = None
) -> list[dict[str, str | None]]:
    """The leaderboard's cells by column (``board_columns``, ``MEMORY_COLUMNS`` when ``memory`` holds an
    entry's model, ``LADDER_COLUMNS`` when ``ladder`` does): formatted numbers, None where missing."""
    rows = []
    for i, r in enumerate(board.iter_rows(named=True), start=1):
        cells: dict[str, str | None] = {
            "rank": str(i) if r[RANKED_BY] is not None else "",
            "model": r["entry"],
        }
        cells |= {k: fmt(r[k], missing=None) for k in (*(m.name for m in metrics()), "key_char_coverage")}
        cells |= {m: fmt(r[m], "d", missing=None) for m in ("n_key_tokens", "n_tokens", "context_limit")}
        cells |= {k: r[k] for k in ("model_name", "artifact", "fingerprint", "contents", "result_id")}
        cells["date"] = r["date"].isoformat() if r["date"] is not None else None
        rows.append(cells | memory_cells(memory_of(r, memory)) | ladder_cells(ladder_of(r, ladder)))
    return rows


def forgetting_memory(path: str | Path | None) -> dict[str, dict]:
    """Per model (its identity, ``keys.model_key``: a curve of another model of the same name is never
    shown), the ``memory`` record (and ``result_id``) of its newest complete forgetting curve; a model
    without one gets its newest run's ``result_id`` and ``incomplete`` (why); {} without a forgetting
    results file."""
    if path is None or not Path(path).is_file():
        return {}
    rows = forgetting_results.read_rows(path)
    complete = forgetting_results.newest_per_identity([row for row in rows if row["complete"]])
    memory = {name: {**row["memory"], "result_id": row["result_id"]} for name, row in complete.items()}
    for name, row in forgetting_results.newest_per_identity(rows).items():
        if name not in memory:
            failed = [p for p in row["points"] if p.get("error") is not None]
            why = f"{len(failed)} of {len(row['points'])} lengths failed (first: {failed[0]['error']})"
            memory[name] = {"incomplete": why, "result_id": row["result_id"]}
    return memory


def memory_of(r: dict, memory: dict[str, dict] | None) -> dict | None:
    """An entry's memory lengths: only for the model at full context (no ``context_limit``), by its
    identity."""
    if r["context_limit"] is not None or r.get("model") is None:
        return None
    return (memory or {}).get(r["model"])


def ladder_of(r: dict, ladders: dict[str, dict] | None) -> dict | None:
    """An entry's ladder: one of the same model with the same settings, at full context (``score_key``)."""
    key = score_key(r.get("model"), r["settings"])
    return None if key is None else (ladders or {}).get(key)


def memory_cells(m: dict | None) -> dict[str, str | None]:
    """The memory columns of one entry, and ``forgetting_incomplete`` (why its runs have no memory
    lengths; Markdown shows ``incomplete``, CSV leaves the cells empty)."""
    if m is None:
        return dict.fromkeys(MEMORY_COLUMNS) | {"forgetting_incomplete": None}
    if "incomplete" in m:
        empty = dict.fromkeys(MEMORY_COLUMNS) | {"forgetting_result_id": m["result_id"]}
        return empty | {"forgetting_incomplete": m["incomplete"]}
    return {
        "fine_memory": str(m["fine"]),
        "coarse_memory": str(m["coarse"]),
        "fine_memory_censored": str(m["fine_censored"]).lower(),
        "coarse_memory_censored": str(m["coarse_censored"]).lower(),
        "forgetting_result_id": m["result_id"],
        "forgetting_incomplete": None,
    }


def ladder_cells(row: dict | None) -> dict[str, str | None]:
    if row is None:
        return dict.fromkeys(LADDER_COLUMNS)
    e = row["effective"]
    length = e["top"] if e["censored"] == "right" else e["length"]
    interval = ladder_results.reading_text(e)[1]
    cells = (
        fmt(length, "d", missing=None),
        interval,
        e["censored"],
        format(e["tolerance"], "g"),
        row["result_id"],
    )
    return dict(zip(LADDER_COLUMNS, cells, strict=True))


def columns(
    board: pl.DataFrame, memory: dict[str, dict] | None, ladder: dict[str, dict] | None = None
) -> dict[str, str | None]:
    rows = list(board.iter_rows(named=True))
    shown = board_columns() | (MEMORY_COLUMNS if any(memory_of(r, memory) for r in rows) else {})
    return shown | (LADDER_COLUMNS if any(ladder_of(r, ladder) for r in rows) else {})


def leaderboard_markdown(
    board: pl.DataFrame,
    source: str | Path | None = None,
    memory: dict[str, dict] | None = None,
    ladder: dict[str, dict] | None = None,
) -> str:
    """The leaderboard as Markdown: a header naming the artifact, then the table."""
    top = newest(board)
    lines = [
        "# LongPPL leaderboard\n\n",
        f"Artifact {md_code(top['artifact'])} (fingerprint {md_code(top['fingerprint'][:12])}, contents "
        f"{md_code((top['contents'] or 'unrecorded')[:12])}), "
        f"{board.height} entries, sorted by LongPPL (lower is better; entries without key tokens last).\n",
    ]
    if source is not None:
        lines.append(f"Scores: {md_code(display_path(source))} (sha256 `{file_sha256(source)}`).\n")
    shown = {k: v for k, v in columns(board, memory, ladder).items() if v is not None}
    if "fine_memory" in shown:
        lines.append(FORGETTING_NOTE)
    if "effective_length" in shown:
        lines.append(LADDER_NOTE)
    cells = table(board, memory, ladder)
    rows = [[markdown_cell(row, k) for k in shown] for row in cells]
    notes = sorted(set(board["unavailable"].drop_nulls().to_list())) if "unavailable" in board.columns else []
    notes = [f"n/a: {md_text(n)}" for n in notes]
    notes += [
        f"incomplete: {md_text(row['model'])}: its forgetting curve ({row['forgetting_result_id']}) has no "
        f"complete run, {md_text(row['forgetting_incomplete'])}"
        for row in cells
        if row["forgetting_incomplete"]
    ]
    return "".join(lines) + "\n" + md_table(list(shown.values()), rows) + "".join(f"\n{n}\n" for n in notes)


def markdown_cell(row: dict[str, str | None], key: str) -> str:
    """A cell as the Markdown table shows it: ``n/a`` for a missing number, ``>`` before a memory
    length still met at the largest length measured."""
    if key in MEMORY_COLUMNS:
        if row.get("forgetting_incomplete"):
            return "incomplete"
        censored = row.get(f"{key}_censored") == "true"
        return "" if row[key] is None else (">" if censored else "") + row[key]
    if key == "effective_length":
        return ladder_results.length_text(row[key] and int(row[key]), row["effective_length_censored"], None)
    if key in LADDER_COLUMNS:
        return row[key] or ""
    return "n/a" if row[key] is None else md_text(row[key])


def leaderboard_csv(
    board: pl.DataFrame, memory: dict[str, dict] | None = None, ladder: dict[str, dict] | None = None
) -> str:
    """The leaderboard rows as CSV, floats with a fixed number of decimals, missing values empty."""
    names = list(columns(board, memory, ladder))
    return csv_text(names, [[row[k] for k in names] for row in table(board, memory, ladder)])


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
    ax.set_title(plot_text(newest(board)["artifact"]), fontsize=9)
    fig.tight_layout()
    return png(fig, "leaderboard")


def render(
    df: pl.DataFrame,
    out_dir: str | Path,
    benchmarks_csv: str | Path | None = None,
    *,
    artifact: str | None = None,
    source: str | Path | None = None,
    forgetting: str | Path | None = None,
    ladder: str | Path | None = None,
) -> dict[str, Path]:
    """Write the leaderboard (and correlations, given a benchmarks CSV) into ``out_dir``.

    ``df`` is ``read_scores`` output (selection applied here) or ``select`` output; ``source`` is the
    scores file, whose sha256 the Markdown records; ``forgetting`` the forgetting-curve results
    (memory columns for the models in it); ``ladder`` the context-ladder results (effective-length
    columns and ``ladder.png`` for the models with a ladder on the artifact). Everything is computed
    before anything is written; correlation files of an earlier run that this one does not produce
    are removed. Returns {file name: path}.
    """
    folder = check(Output("out_dir", Path(out_dir), BOARD_FOLDER))
    board = select(df, artifact)
    memory = forgetting_memory(forgetting)
    ladders = ladder_results.newest_on(ladder, newest(board))
    matched = [ladder_of(r, ladders) for r in board.iter_rows(named=True)]
    shown = list({r["result_id"]: r for r in matched if r is not None}.values())  # the entries' own ladders
    files = {
        "leaderboard.md": leaderboard_markdown(board, source, memory, ladders).encode(),
        "leaderboard.csv": leaderboard_csv(board, memory, ladders).encode(),
        "leaderboard.png": leaderboard_png(board),
    }
    if shown:
        files["ladder.png"] = ladder_plot.curves_png(shown, newest(board)["artifact"])
    if benchmarks_csv is not None:
        files.update(correlations.files(board, benchmarks_csv))
    out = make_folder(folder)
    correlations.remove_stale(out, set(files))
    if "ladder.png" not in files:  # an earlier run's, of other models or another artifact
        (out / "ladder.png").unlink(missing_ok=True)
    paths = {}
    for name, data in files.items():
        write_bytes_atomic(out / name, data)
        paths[name] = Path(out_dir) / name
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


@pydantic.dataclasses.dataclass(frozen=True)
class LeaderboardOptions:
    """`make leaderboard`'s settings (``conf/leaderboard.yaml``)."""

    results: str  # the score stage's results file
    out_dir: str
    artifact: Text | None = None  # name, fingerprint, contents hash or prefix; None: the newest result's
    benchmarks: str | None = None  # CSV: `model`, then one numeric column per benchmark
    forgetting_results: str | None = None  # None: forgetting.jsonl beside `results`
    ladder_results: str | None = None  # None: ladder.jsonl beside `results`
    # lm-eval results files or folders (`make lm-eval`); None: the folder lm-eval/ beside `results`
    lmeval_results: str | list[str] | None = None


@dataclass
class Leaderboard:
    """What `make leaderboard` wrote (by file name) and shows: the Markdown tables and the notes."""

    paths: dict[str, Path]
    markdown: list[str]
    notes: list[str]


def write_leaderboard(options: LeaderboardOptions) -> Leaderboard:
    """Every result read (scores, lm-eval's), the entries selected, the tables and plots rendered and
    written into ``out_dir``, LooGLE's table beside LongPPL's."""
    results = Path(options.results)
    check(Output("out_dir", Path(options.out_dir), BOARD_FOLDER))  # before any work
    scores = read_all_results(results, options.lmeval_results)
    paths = render(
        scores,
        Path(options.out_dir),
        None if options.benchmarks is None else Path(options.benchmarks),
        artifact=options.artifact,
        source=results if results.is_file() else None,
        forgetting=options.forgetting_results or results.with_name("forgetting.jsonl"),
        ladder=options.ladder_results or results.with_name("ladder.jsonl"),
    )
    markdown = [paths["leaderboard.md"].read_text(encoding="utf-8")]
    out = make_folder(check(Output("out_dir", Path(options.out_dir), BOARD_FOLDER)))
    for name, data in loogle_board.files(results.with_name("loogle.jsonl")).items():
        write_bytes_atomic(out / name, data)
        paths[name] = Path(options.out_dir) / name
        if name.endswith(".md"):
            markdown.append(data.decode())
    notes = [note] if (note := other_contents(scores, select(scores, options.artifact))) else []
    return Leaderboard(paths, markdown, notes + partial_notes(scores))
