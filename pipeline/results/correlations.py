"""Correlation of the leaderboard's metrics with long-context benchmark scores (paper Table 1), computed:
the benchmarks file read and checked (first column ``model``, the leaderboard's model names; then one
numeric column per benchmark), the models both have, and Pearson and Spearman correlations with
two-sided p-values (scipy) of PPL, LongPPL and LongPPL-soft with each benchmark
(``pipeline.reporting.correlations`` renders them)."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.errors import PipelineError
from pipeline.metric_registry import perplexities

MISSING = {"", "nan", "na", "n/a", "null", "none"}
SCHEMA: dict[str, Any] = {
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


# ----------------------------------------------------------------------------------------------
# The benchmarks file


def load_benchmarks(path: str | Path) -> pl.DataFrame:
    """A benchmarks CSV as ``model`` and one Float64 column per benchmark; empty cells and
    NaN/NA/null are missing values (null)."""
    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"benchmarks file {path} does not exist: pass benchmarks=<path to a CSV>")
    try:
        header = pl.read_csv(path, has_header=False, n_rows=1, infer_schema=False).row(0)
        cells = pl.read_csv(path, infer_schema=False)
    except (pl.exceptions.PolarsError, ValueError) as exc:
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise PipelineError(
            f"{path} is not a CSV table with one cell per column in every row ({detail})"
        ) from None
    header = [(h or "").strip() for h in header]
    if not header or header[0] != "model" or len(header) < 2:
        raise PipelineError(
            f"{path} must start with a header `model,<benchmark>,...`: "
            "first column `model`, then one numeric column per benchmark"
        )
    if len(set(header)) != len(header):
        raise PipelineError(f"{path} repeats a column name in its header: give every benchmark its own name")
    cells = cells.rename(dict(zip(cells.columns, header, strict=True)))
    cells = cells.filter(~pl.all_horizontal(pl.all().is_null()))  # blank lines
    table = pl.DataFrame(
        {"model": [(m or "").strip() for m in cells["model"]]}
        | {name: _numbers(path, name, cells[name].to_list()) for name in header[1:]},
        schema={name: pl.String if name == "model" else pl.Float64 for name in header},
    )
    repeated = sorted(table.filter(pl.col("model").is_duplicated())["model"].unique())
    if repeated:
        raise PipelineError(f"{path} lists {', '.join(repeated)} more than once: keep one row per model")
    return table


def _numbers(path: Path, name: str, cells: list[str | None]) -> list[float | None]:
    values = []
    for row, cell in enumerate(cells, start=2):
        text = (cell or "").strip()
        if text.lower() in MISSING:
            values.append(None)
            continue
        try:
            value = float(text)
        except ValueError:
            raise PipelineError(
                f"{path} row {row}: {name}={text!r} is not a number (leave the cell empty if missing)"
            ) from None
        values.append(None if math.isnan(value) else value)
    return values


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


# ----------------------------------------------------------------------------------------------
# The correlations


def correlations(
    board: pl.DataFrame, benchmarks: pl.DataFrame, source: str | Path = "benchmarks"
) -> pl.DataFrame:
    """Pearson and Spearman correlation (two-sided p-values) of each metric with each benchmark.

    One row per (metric, benchmark), the registry's perplexities in its order and benchmarks in file
    order, over the common models that have both values (``models``, ``;``-separated). Fewer than 3
    such models or a constant column gives nulls and a ``note``.
    """
    common = common_models(board, benchmarks, source)
    metric_rows = {r["entry"]: r for r in board.iter_rows(named=True)}
    bench_rows = {r["model"]: r for r in benchmarks.iter_rows(named=True)}
    rows = []
    for metric, label in perplexities().items():
        for bench in benchmarks.columns[1:]:
            pairs = [
                (m, metric_rows[m][metric], bench_rows[m][bench])
                for m in common
                if metric_rows[m][metric] is not None and bench_rows[m][bench] is not None
            ]
            stats, note = correlate([p[1] for p in pairs], [p[2] for p in pairs])
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
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


def correlate(xs: list[float], ys: list[float]) -> tuple[dict[str, float | None], str | None]:
    """Pearson and Spearman correlations with two-sided p-values (scipy), and a note when undefined."""
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
