"""Stage 3: the leaderboard. Reads stage 2's scores file, writes tables, plots and benchmark correlations.

Input: ``scores.jsonl``, one JSON object per scored (model, artifact, settings), appended by stage 2.
One artifact is shown at a time (default: the one of the newest result); within it, a model scored
several times with the same settings keeps its newest result. Outputs, all byte-identical for the same
inputs (no timestamps, fixed float formatting, PNGs without software metadata):

``leaderboard.md`` / ``leaderboard.csv`` / ``leaderboard.png``
    one row per entry, sorted by LongPPL ascending (entries without key tokens last, ties by name);
    the PNG plots PPL against LongPPL.
``correlations.md`` / ``correlations.csv`` / ``scatter-<benchmark>.png`` (with ``benchmarks=<csv>``)
    Pearson and Spearman correlations (with two-sided p-values) of PPL, LongPPL and LongPPL-soft with
    each benchmark column, over the models in both files (paper Table 1).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.artifacts import write_bytes_atomic
from pipeline.cli import hydra_main
from pipeline.errors import PipelineError
from pipeline.provenance import file_sha256

METRICS = {"ppl": "PPL", "longppl": "LongPPL", "longppl_soft": "LongPPL-soft"}
FLOAT_FIELDS = ("ppl", "longppl", "longppl_soft", "key_char_coverage")
INT_FIELDS = ("n_tokens", "n_key_tokens")
SCHEMA: dict[str, Any] = {
    "line": pl.Int64,
    "result_id": pl.String,
    "model_name": pl.String,
    "artifact": pl.String,
    "fingerprint": pl.String,
    "settings": pl.String,
    "context_limit": pl.Int64,
    **{name: pl.Float64 for name in FLOAT_FIELDS[:3]},
    **{name: pl.Int64 for name in INT_FIELDS},
    "key_char_coverage": pl.Float64,
    "date": pl.Datetime("us", "UTC"),
}
MISSING = {"", "nan", "na", "n/a", "null", "none"}
FIGSIZE = (7.0, 5.0)
DPI = 100
DECIMALS = 4
SCORE_HINT = "run `make score MODEL=...` first"


# ----------------------------------------------------------------------------------------------
# Reading the scores file


def load_results(path: str | Path) -> pl.DataFrame:
    """One row per result line, flattened (see SCHEMA); ``line`` is the 1-based line number."""
    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"no scores in {path} (the file does not exist): {SCORE_HINT}")
    rows = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            rows.append(_parse_line(text, number))
        except ValueError as exc:
            raise PipelineError(
                f"{path} line {number} is not a valid result ({exc}): fix or delete that line"
            ) from None
    if not rows:
        raise PipelineError(f"no scores in {path} (the file is empty): {SCORE_HINT}")
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


def _parse_line(text: str, number: int) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    artifact = _field(obj, "artifact", dict)
    settings = _field(obj, "settings", dict, required=False) or {}
    corpus = _field(obj, "corpus", dict)
    row = {
        "line": number,
        "result_id": _field(obj, "result_id", str, required=False),
        "model_name": _field(obj, "model_name", str),
        "artifact": _field(artifact, "name", str, "artifact.name"),
        "fingerprint": _field(artifact, "fingerprint", str, "artifact.fingerprint"),
        "settings": json.dumps(settings, sort_keys=True, separators=(",", ":")),
        "context_limit": _number(settings, "context_limit", int, "settings."),
        "date": _parse_date(_field(obj, "date", str, required=False)),
    }
    row.update({name: _number(corpus, name, float, "corpus.") for name in FLOAT_FIELDS})
    row.update({name: _number(corpus, name, int, "corpus.") for name in INT_FIELDS})
    return row


def _field(obj: dict, key: str, kind: type, label: str | None = None, required: bool = True) -> Any:
    value = obj.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, kind):
        kind_name = {dict: "a JSON object", str: "a string"}.get(kind, kind.__name__)
        raise ValueError(f"`{label or key}` is {'missing' if value is None else 'not ' + kind_name}")
    return value


def _number(obj: dict, key: str, kind: type, prefix: str) -> float | int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"`{prefix}{key}` is not a number")
    if kind is int:
        if value != int(value):
            raise ValueError(f"`{prefix}{key}` is not an integer")
        return int(value)
    return None if math.isnan(value) else float(value)


def _parse_date(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"`date` {text!r} is not an ISO 8601 time") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.astimezone(timezone.utc)


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
    fingerprint = _pick_fingerprint(ordered, artifact)
    rows = ordered.filter(pl.col("fingerprint") == fingerprint)
    rows = rows.unique(subset=["model_name", "settings"], keep="last", maintain_order=True)
    rows = rows.with_columns(pl.Series("entry", _entry_names(rows), dtype=pl.String))
    return rows.select("entry", *ordered.columns).sort(["longppl", "entry"], nulls_last=True)


def _pick_fingerprint(ordered: pl.DataFrame, artifact: str | None) -> str:
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


def _entry_names(rows: pl.DataFrame) -> list[str]:
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


def _newest(board: pl.DataFrame) -> dict[str, Any]:
    return board.sort(["date", "line"], nulls_last=False).row(-1, named=True)


# ----------------------------------------------------------------------------------------------
# Leaderboard outputs


def _fmt(value: float | int | None, spec: str = f".{DECIMALS}f", missing: str = "") -> str:
    return missing if value is None else format(value, spec)


def _display(path: str | Path) -> str:
    """A path relative to the working directory when under it (outputs do not depend on the checkout)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = [header, ["---"] * len(header), *rows]
    return "".join("| " + " | ".join(_md_cell(c) for c in line) + " |\n" for line in lines)


def _ranks(board: pl.DataFrame) -> list[str]:
    return [str(i) if v is not None else "" for i, v in enumerate(board["longppl"], start=1)]


def leaderboard_markdown(board: pl.DataFrame, source: str | Path | None = None) -> str:
    """The leaderboard as Markdown: a header naming the artifact, then the table."""
    newest = _newest(board)
    lines = [
        "# LongPPL leaderboard\n\n",
        f"Artifact `{newest['artifact']}` (fingerprint `{newest['fingerprint'][:12]}`), "
        f"{board.height} entries, sorted by LongPPL (lower is better; entries without key tokens last).\n",
    ]
    if source is not None:
        lines.append(f"Scores: `{_display(source)}` (sha256 `{file_sha256(source)}`).\n")
    header = ["#", "model", "LongPPL", "PPL", "LongPPL-soft", "key tokens", "tokens", "key-char coverage"]
    rows = [
        [
            rank,
            r["entry"],
            *(_fmt(r[m], missing="n/a") for m in ("longppl", "ppl", "longppl_soft")),
            *(_fmt(r[m], "d", "n/a") for m in ("n_key_tokens", "n_tokens")),
            _fmt(r["key_char_coverage"], missing="n/a"),
        ]
        for rank, r in zip(_ranks(board), board.iter_rows(named=True), strict=True)
    ]
    return "".join(lines) + "\n" + _md_table(header, rows)


LEADERBOARD_CSV = [
    *("rank", "model", "longppl", "ppl", "longppl_soft", "n_key_tokens", "n_tokens", "key_char_coverage"),
    *("context_limit", "model_name", "artifact", "fingerprint", "date", "result_id"),
]


def leaderboard_csv(board: pl.DataFrame) -> str:
    """The leaderboard rows as CSV, floats with a fixed number of decimals, missing values empty."""
    rows = []
    for rank, r in zip(_ranks(board), board.iter_rows(named=True), strict=True):
        date = r["date"].isoformat() if r["date"] is not None else ""
        rows.append(
            [rank, r["entry"], *(_fmt(r[m]) for m in ("longppl", "ppl", "longppl_soft"))]
            + [_fmt(r[m], "d") for m in ("n_key_tokens", "n_tokens")]
            + [_fmt(r["key_char_coverage"]), _fmt(r["context_limit"], "d")]
            + [r["model_name"], r["artifact"], r["fingerprint"], date, r["result_id"] or ""]
        )
    return _csv_text([LEADERBOARD_CSV, *rows])


def _csv_text(rows: list[list[Any]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def _figure(size: tuple[float, float] = FIGSIZE) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def _labelled_scatter(ax: Any, xs: list[float], ys: list[float], labels: list[str]) -> None:
    ax.scatter(xs, ys, color="tab:blue", zorder=2)
    for x, y, label in zip(xs, ys, labels, strict=True):
        ax.annotate(label, (x, y), xytext=(4, 4), textcoords="offset points", fontsize=8)
    ax.margins(x=0.2, y=0.1)  # room for the labels
    ax.grid(True, alpha=0.3)


def leaderboard_png(board: pl.DataFrame) -> bytes:
    """PPL against LongPPL, one labelled point per entry with a LongPPL."""
    fig = _figure()
    ax = fig.add_subplot()
    shown = board.filter(pl.col("longppl").is_not_null() & pl.col("ppl").is_not_null())
    _labelled_scatter(ax, shown["ppl"].to_list(), shown["longppl"].to_list(), shown["entry"].to_list())
    if shown.is_empty():
        ax.text(0.5, 0.5, "no entry has both PPL and LongPPL", ha="center", transform=ax.transAxes)
    ax.set_xlabel("PPL")
    ax.set_ylabel("LongPPL")
    ax.set_title(f"{_newest(board)['artifact']}", fontsize=9)
    fig.tight_layout()
    return _png(fig)


# ----------------------------------------------------------------------------------------------
# Benchmarks and correlations


def load_benchmarks(path: str | Path) -> pl.DataFrame:
    """A benchmarks CSV: first column ``model``, then one numeric column per benchmark.

    Empty cells and NaN/NA/null are missing values (null).
    """
    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"benchmarks file {path} does not exist: pass benchmarks=<path to a CSV>")
    with path.open(encoding="utf-8-sig", newline="") as handle:
        table = [row for row in csv.reader(handle) if any(cell.strip() for cell in row)]
    header = [h.strip() for h in table[0]] if table else []
    if not header or header[0] != "model" or len(header) < 2:
        raise PipelineError(
            f"{path} must start with a header `model,<benchmark>,...`: "
            "first column `model`, then one numeric column per benchmark"
        )
    if len(set(header)) != len(header):
        raise PipelineError(f"{path} repeats a column name in its header: give every benchmark its own name")
    columns: dict[str, list[Any]] = {name: [] for name in header}
    for number, row in enumerate(table[1:], start=2):
        _benchmark_row(path, number, header, row, columns)
    repeated = sorted({m for m in columns["model"] if columns["model"].count(m) > 1})
    if repeated:
        raise PipelineError(f"{path} lists {', '.join(repeated)} more than once: keep one row per model")
    schema = {name: pl.String if name == "model" else pl.Float64 for name in header}
    return pl.DataFrame(columns, schema=schema)


def _benchmark_row(path: Path, number: int, header: list[str], row: list[str], columns: dict) -> None:
    if len(row) != len(header):
        raise PipelineError(f"{path} row {number} has {len(row)} cells, the header has {len(header)}")
    columns["model"].append(row[0].strip())
    for name, cell in zip(header[1:], row[1:], strict=True):
        text = cell.strip()
        if text.lower() in MISSING:
            columns[name].append(None)
            continue
        try:
            value = float(text)
        except ValueError:
            raise PipelineError(
                f"{path} row {number}: {name}={text!r} is not a number (leave the cell empty if missing)"
            ) from None
        columns[name].append(None if math.isnan(value) else value)


def common_models(
    board: pl.DataFrame, benchmarks: pl.DataFrame, source: str | Path = "benchmarks"
) -> list[str]:
    """Sorted leaderboard entries that have a benchmark row; every benchmark row must match an entry."""
    entries, named = set(board["entry"]), set(benchmarks["model"])
    unknown = sorted(named - entries)
    if unknown:
        raise PipelineError(
            f"{source}: model names not on the leaderboard: {', '.join(unknown)}; leaderboard models "
            f"without a benchmark row: {', '.join(sorted(entries - named)) or 'none'}; "
            "the `model` column must use the leaderboard's model names"
        )
    common = sorted(entries & named)
    if len(common) < 3:
        raise PipelineError(
            f"only {len(common)} model(s) are both on the leaderboard and in {source} "
            f"({', '.join(common) or 'none'}): correlations need at least 3; score more models "
            "(`make score MODEL=...`) or add their benchmark rows"
        )
    return common


CORRELATIONS_SCHEMA: dict[str, Any] = {
    "metric": pl.String,
    "benchmark": pl.String,
    "n": pl.Int64,
    "pearson_r": pl.Float64,
    "pearson_p": pl.Float64,
    "spearman_r": pl.Float64,
    "spearman_p": pl.Float64,
    "models": pl.String,
    "note": pl.String,
}


def correlations(
    board: pl.DataFrame, benchmarks: pl.DataFrame, source: str | Path = "benchmarks"
) -> pl.DataFrame:
    """Pearson and Spearman correlation (two-sided p-values) of each metric with each benchmark.

    One row per (metric, benchmark), metrics in METRICS order and benchmarks in file order, over the
    common models that have both values (``models``, ``;``-separated). Fewer than 3 such models or a
    constant column gives nulls and a ``note``.
    """
    common = common_models(board, benchmarks, source)
    metric_rows = {r["entry"]: r for r in board.iter_rows(named=True)}
    bench_rows = {r["model"]: r for r in benchmarks.iter_rows(named=True)}
    rows = []
    for metric, label in METRICS.items():
        for bench in benchmarks.columns[1:]:
            pairs = [
                (m, metric_rows[m][metric], bench_rows[m][bench])
                for m in common
                if metric_rows[m][metric] is not None and bench_rows[m][bench] is not None
            ]
            stats, note = _correlate([p[1] for p in pairs], [p[2] for p in pairs])
            models = ";".join(p[0] for p in pairs)
            rows.append(
                {
                    "metric": label,
                    "benchmark": bench,
                    "n": len(pairs),
                    **stats,
                    "models": models,
                    "note": note,
                }
            )
    return pl.DataFrame(rows, schema=CORRELATIONS_SCHEMA, orient="row")


def _correlate(xs: list[float], ys: list[float]) -> tuple[dict[str, float | None], str | None]:
    from scipy import stats

    empty = dict.fromkeys(("pearson_r", "pearson_p", "spearman_r", "spearman_p"))
    if len(xs) < 3:
        return empty, "fewer than 3 models with values"
    if len(set(xs)) < 2 or len(set(ys)) < 2:
        return empty, "constant values"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pearson = stats.pearsonr(xs, ys)
        spearman = stats.spearmanr(xs, ys)
    values = (pearson.statistic, pearson.pvalue, spearman.statistic, spearman.pvalue)
    out = {k: (None if math.isnan(v) else float(v)) for k, v in zip(empty, values, strict=True)}
    return out, None if None not in out.values() else "undefined (scipy returned NaN)"


def correlations_csv(table: pl.DataFrame) -> str:
    """Correlations as CSV with full-precision (round-trip) floats; missing values empty."""
    rows = [
        [repr(v) if isinstance(v, float) else ("" if v is None else v) for v in row]
        for row in table.iter_rows()
    ]
    return _csv_text([table.columns, *rows])


def correlations_markdown(
    board: pl.DataFrame, benchmarks: pl.DataFrame, table: pl.DataFrame, source: str | Path
) -> str:
    """Correlations as Markdown: Pearson and Spearman tables (metric x benchmark) and notes."""
    newest = _newest(board)
    common = common_models(board, benchmarks, source)
    head = [
        "# Correlation of perplexity metrics with long-context benchmarks\n\n",
        f"Leaderboard: artifact `{newest['artifact']}` (fingerprint `{newest['fingerprint'][:12]}`). "
        f"Benchmarks: `{_display(source)}` (sha256 `{file_sha256(source)}`).\n",
        f"Models in both ({len(common)}): {', '.join(common)}.\n\n",
        "Lower perplexity should go with higher benchmark scores, so a metric that tracks long-context "
        "ability shows a strongly negative correlation (paper Table 1, Pearson: LongPPL -0.96/-0.86/-0.84 "
        "with LongBench/LongEval/RULER, PPL -0.11/0.31/0.33). p-values are two-sided "
        "(scipy.stats.pearsonr / spearmanr; Spearman's uses a t approximation) and rough with few models: "
        "n, the number of models with both values, is given per cell.\n",
    ]
    body = [_stat_table(table, benchmarks.columns[1:], "pearson", "Pearson r")]
    body.append(_stat_table(table, benchmarks.columns[1:], "spearman", "Spearman rho"))
    notes = _notes(board, benchmarks, table, common)
    tail = ["\n## Notes\n\n", *(f"- {n}\n" for n in notes)] if notes else []
    return "".join(head + body + tail)


def _stat_table(table: pl.DataFrame, benches: list[str], kind: str, title: str) -> str:
    cells = {(r["metric"], r["benchmark"]): r for r in table.iter_rows(named=True)}
    rows = []
    for label in METRICS.values():
        row = [label]
        for bench in benches:
            r = cells[(label, bench)]
            value, p = r[f"{kind}_r"], r[f"{kind}_p"]
            row.append("n/a" if value is None else f"{value:.3f} (p={p:.3g}, n={r['n']})")
        rows.append(row)
    return f"\n## {title}\n\n" + _md_table(["metric", *benches], rows)


def _notes(
    board: pl.DataFrame, benchmarks: pl.DataFrame, table: pl.DataFrame, common: list[str]
) -> list[str]:
    notes = []
    left_out = sorted(set(board["entry"]) - set(common))
    if left_out:
        notes.append(f"Leaderboard entries without a benchmark row (left out): {', '.join(left_out)}.")
    bench_rows = {r["model"]: r for r in benchmarks.iter_rows(named=True)}
    for bench in benchmarks.columns[1:]:
        missing = [m for m in common if bench_rows[m][bench] is None]
        if missing:
            notes.append(f"{bench}: no value for {', '.join(missing)}; left out of its correlations.")
    board_rows = {r["entry"]: r for r in board.iter_rows(named=True)}
    for metric, label in METRICS.items():
        missing = [m for m in common if board_rows[m][metric] is None]
        if missing:
            notes.append(f"{label}: no value for {', '.join(missing)} (no key tokens); left out of its rows.")
    for r in table.filter(pl.col("note").is_not_null()).iter_rows(named=True):
        notes.append(f"{r['metric']} vs {r['benchmark']}: n/a, {r['note']} (n={r['n']}).")
    return notes


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_.") or "benchmark"


def scatter_png(board: pl.DataFrame, benchmarks: pl.DataFrame, table: pl.DataFrame, bench: str) -> bytes:
    """Three panels (PPL, LongPPL, LongPPL-soft vs one benchmark), one labelled point per model."""
    fig = _figure((4.0 * len(METRICS), 4.0))
    board_rows = {r["entry"]: r for r in board.iter_rows(named=True)}
    scores = dict(zip(benchmarks["model"], benchmarks[bench], strict=True))
    for i, (metric, label) in enumerate(METRICS.items(), start=1):
        ax = fig.add_subplot(1, len(METRICS), i)
        stats = table.filter((pl.col("metric") == label) & (pl.col("benchmark") == bench)).row(0, named=True)
        models = [m for m in stats["models"].split(";") if m]
        _labelled_scatter(ax, [board_rows[m][metric] for m in models], [scores[m] for m in models], models)
        r, rho = stats["pearson_r"], stats["spearman_r"]
        summary = "n/a" if r is None else f"r={r:.2f}, rho={rho:.2f}"
        ax.set_title(f"{label}: {summary} (n={stats['n']})", fontsize=9)
        ax.set_xlabel(label)
        ax.set_ylabel(bench)
    fig.tight_layout()
    return _png(fig)


# ----------------------------------------------------------------------------------------------
# Rendering


def render(
    df: pl.DataFrame,
    out_dir: str | Path,
    benchmarks_csv: str | Path | None = None,
    *,
    artifact: str | None = None,
    source: str | Path | None = None,
) -> dict[str, Path]:
    """Write the leaderboard (and correlations, given a benchmarks CSV) into ``out_dir``.

    ``df`` is ``load_results`` output (selection applied here) or ``select`` output; ``source`` is the
    scores file, whose sha256 the Markdown records. Everything is computed before anything is written;
    correlation files of an earlier run that this one does not produce are removed. Returns
    {file name: path}.
    """
    board = select(df, artifact)
    files = {
        "leaderboard.md": leaderboard_markdown(board, source).encode(),
        "leaderboard.csv": leaderboard_csv(board).encode(),
        "leaderboard.png": leaderboard_png(board),
    }
    if benchmarks_csv is not None:
        files.update(_correlation_files(board, benchmarks_csv))
    out = Path(out_dir)
    _remove_stale(out, set(files))
    paths = {}
    for name, data in files.items():
        write_bytes_atomic(out / name, data)
        paths[name] = out / name
    return paths


def _correlation_files(board: pl.DataFrame, benchmarks_csv: str | Path) -> dict[str, bytes]:
    benchmarks = load_benchmarks(benchmarks_csv)
    table = correlations(board, benchmarks, benchmarks_csv)
    files = {
        "correlations.md": correlations_markdown(board, benchmarks, table, benchmarks_csv).encode(),
        "correlations.csv": correlations_csv(table).encode(),
    }
    slugs: dict[str, str] = {}
    for bench in benchmarks.columns[1:]:
        slug = _slug(bench)
        if slug in slugs:
            raise PipelineError(
                f"benchmarks {slugs[slug]!r} and {bench!r} would both be plotted to scatter-{slug}.png: "
                "rename one column"
            )
        slugs[slug] = bench
        files[f"scatter-{slug}.png"] = scatter_png(board, benchmarks, table, bench)
    return files


def _remove_stale(out: Path, keep: set[str]) -> None:
    if not out.is_dir():
        return
    for pattern in ("correlations.md", "correlations.csv", "scatter-*.png"):
        for path in out.glob(pattern):
            if path.name not in keep:
                path.unlink()


# ----------------------------------------------------------------------------------------------
# Command line


def run(cfg: Any) -> dict[str, Path]:
    """Load, select, render; print the Markdown leaderboard and the written paths."""
    from hydra.utils import to_absolute_path

    results = Path(to_absolute_path(str(cfg.results)))
    benchmarks = cfg.get("benchmarks")
    artifact = cfg.get("artifact")
    paths = render(
        load_results(results),
        Path(to_absolute_path(str(cfg.out_dir))),
        None if benchmarks is None else Path(to_absolute_path(str(benchmarks))),
        artifact=None if artifact is None else str(artifact),
        source=results,
    )
    print(paths["leaderboard.md"].read_text(encoding="utf-8"))
    for path in paths.values():
        print(f"wrote {path}")
    return paths


def main() -> None:
    hydra_main("leaderboard", run)


if __name__ == "__main__":
    main()
