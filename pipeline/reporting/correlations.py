"""Correlation of the leaderboard's metrics with long-context benchmark scores (paper Table 1), rendered
(``pipeline.results.correlations`` computes them).

Given ``benchmarks=<csv>`` (first column ``model``, the leaderboard's model names; then one numeric
column per benchmark), the leaderboard also writes ``correlations.md`` / ``correlations.csv`` (Pearson
and Spearman correlations, with two-sided p-values, of PPL, LongPPL and LongPPL-soft with each
benchmark over the models in both files) and ``scatter-<benchmark>.png``.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pipeline.errors import PipelineError
from pipeline.formats import file_slug
from pipeline.metric_registry import perplexities
from pipeline.provenance import file_sha256
from pipeline.reporting.common import (
    csv_text,
    display_path,
    figure,
    labelled_scatter,
    md_code,
    md_table,
    md_text,
    plot_text,
    png,
)
from pipeline.results.correlations import common_models, correlations, load_benchmarks
from pipeline.results.entries import newest


def correlations_csv(table: pl.DataFrame) -> str:
    """Correlations as CSV with full-precision (round-trip) floats; missing values empty."""
    rows = [
        [repr(v) if isinstance(v, float) else (None if v is None else str(v)) for v in row]
        for row in table.iter_rows()
    ]
    return csv_text(table.columns, rows)


def correlations_markdown(
    board: pl.DataFrame, benchmarks: pl.DataFrame, table: pl.DataFrame, source: str | Path
) -> str:
    """Correlations as Markdown: Pearson and Spearman tables (metric x benchmark) and notes."""
    top = newest(board)
    common = common_models(board, benchmarks, source)
    head = [
        "# Correlation of perplexity metrics with long-context benchmarks\n\n",
        f"Leaderboard: artifact {md_code(top['artifact'])} (fingerprint `{top['fingerprint'][:12]}`). "
        f"Benchmarks: {md_code(display_path(source))} (sha256 `{file_sha256(source)}`).\n",
        f"Models in both ({len(common)}): {names(common)}.\n\n",
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
    for label in perplexities().values():
        row = [label]
        for bench in benches:
            r = cells[(label, bench)]
            value, p = r[f"{kind}_r"], r[f"{kind}_p"]
            row.append("n/a" if value is None else f"{value:.3f} (p={p:.3g}, n={r['n']})")
        rows.append(row)
    return f"\n## {title}\n\n" + md_table(["metric", *map(md_text, benches)], rows)


def _notes(
    board: pl.DataFrame, benchmarks: pl.DataFrame, table: pl.DataFrame, common: list[str]
) -> list[str]:
    notes = []
    left_out = sorted(set(board["entry"]) - set(common))
    if left_out:
        notes.append(f"Leaderboard entries without a benchmark row (left out): {names(left_out)}.")
    bench_rows = {r["model"]: r for r in benchmarks.iter_rows(named=True)}
    for bench in benchmarks.columns[1:]:
        missing = [m for m in common if bench_rows[m][bench] is None]
        if missing:
            notes.append(f"{md_text(bench)}: no value for {names(missing)}; left out of its correlations.")
    board_rows = {r["entry"]: r for r in board.iter_rows(named=True)}
    for metric, label in perplexities().items():
        missing = [m for m in common if board_rows[m][metric] is None]
        if missing:
            notes.append(f"{label}: no value for {names(missing)} (no key tokens); left out of its rows.")
    for r in table.filter(pl.col("note").is_not_null()).iter_rows(named=True):
        notes.append(f"{r['metric']} vs {md_text(r['benchmark'])}: n/a, {r['note']} (n={r['n']}).")
    return notes


def names(models: list[str]) -> str:
    """Model names in Markdown text, each shown literally."""
    return ", ".join(md_text(m) for m in models)


# ----------------------------------------------------------------------------------------------
# Pictures and files


def scatter_png(board: pl.DataFrame, benchmarks: pl.DataFrame, table: pl.DataFrame, bench: str) -> bytes:
    """Three panels (PPL, LongPPL, LongPPL-soft vs one benchmark), one labelled point per model."""
    fig = figure((4.0 * len(perplexities()), 4.0))
    board_rows = {r["entry"]: r for r in board.iter_rows(named=True)}
    scores = dict(zip(benchmarks["model"], benchmarks[bench], strict=True))
    for i, (metric, label) in enumerate(perplexities().items(), start=1):
        ax = fig.add_subplot(1, len(perplexities()), i)
        stats = table.filter((pl.col("metric") == label) & (pl.col("benchmark") == bench)).row(0, named=True)
        models = [m for m in stats["models"].split(";") if m]
        labelled_scatter(ax, [board_rows[m][metric] for m in models], [scores[m] for m in models], models)
        r, rho = stats["pearson_r"], stats["spearman_r"]
        summary = "n/a" if r is None else f"r={r:.2f}, rho={rho:.2f}"
        ax.set_title(f"{label}: {summary} (n={stats['n']})", fontsize=9)
        ax.set_xlabel(label)
        ax.set_ylabel(plot_text(bench))
    fig.tight_layout()
    return png(fig, "leaderboard")


def files(board: pl.DataFrame, benchmarks_csv: str | Path) -> dict[str, bytes]:
    """{file name: contents} of the correlation outputs."""
    benchmarks = load_benchmarks(benchmarks_csv)
    table = correlations(board, benchmarks, benchmarks_csv)
    out = {
        "correlations.md": correlations_markdown(board, benchmarks, table, benchmarks_csv).encode(),
        "correlations.csv": correlations_csv(table).encode(),
    }
    slugs: dict[str, str] = {}
    for bench in benchmarks.columns[1:]:
        name = file_slug(bench, "benchmark")
        if name in slugs:
            raise PipelineError(
                f"benchmarks {slugs[name]!r} and {bench!r} would both be plotted to scatter-{name}.png: "
                "rename one column"
            )
        slugs[name] = bench
        out[f"scatter-{name}.png"] = scatter_png(board, benchmarks, table, bench)
    return out


def remove_stale(out: Path, keep: set[str]) -> None:
    """Delete correlation files of an earlier run that this run does not write."""
    if not out.is_dir():
        return
    for pattern in ("correlations.md", "correlations.csv", "scatter-*.png"):
        for path in out.glob(pattern):
            if path.name not in keep:
                path.unlink()
