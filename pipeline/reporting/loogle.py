"""LooGLE rendered: the summary of a task's metrics (`make loogle`, `make loogle-metrics`), and the
LooGLE table of `make leaderboard`: the newest run of each entry of ``loogle.jsonl`` (beside the scores
file; ``pipeline.results.loogle``), one row per model and task, as ``loogle.md`` and ``loogle.csv``. An
entry is the model's identity, the task, its questions and the settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.formats import terminal_text
from pipeline.reporting.common import csv_text, fmt, md_table, md_text
from pipeline.results.loogle import METRIC_LABELS, newest_rows

# CSV name -> Markdown header.
COLUMNS = {
    "model": "model",
    "task": "task",
    "data": "data",
    "n_questions": "questions",
    "max_length": "max_length",
    **METRIC_LABELS,
    "exact_match": "exact",
    "partial_match": "partial",
    "reorder_location_mean": "reorder LMD",
    "result_id": "result",
}
TEXT_COLUMNS = ("model", "task", "data", "result_id")  # from results lines: escaped like model names
NOTE = (
    "LooGLE (`make loogle`, newest run per model, task, questions and settings; docs/loogle.md): "
    "ROUGE is recall, BERTScore is the prediction's precision as LooGLE computes it; empty: not computed "
    "(its reason is in loogle.jsonl) or not a metric of the task."
)


def cells(row: dict[str, Any]) -> dict[str, str | None]:
    metrics = row["metrics"]
    reorder = (row.get("reorder") or {}).get("metrics") or {}
    values = {name: fmt(metrics[name]) if metrics.get(name) is not None else None for name in COLUMNS}
    return values | {
        "model": row["model_name"],
        "task": row["task"],
        "data": row["data"],
        "n_questions": str(row["n_questions"]),
        "max_length": None
        if row["settings"].get("max_length") is None
        else str(row["settings"]["max_length"]),
        "reorder_location_mean": None
        if reorder.get("location_mean") is None
        else fmt(reorder["location_mean"]),
        "result_id": row["result_id"],
    }


def table(path: str | Path) -> list[dict[str, str | None]]:
    rows = sorted(newest_rows(path), key=lambda r: (r["task"], r["model_name"], r["result_id"]))
    return [cells(row) for row in rows]


def files(path: str | Path) -> dict[str, bytes]:
    """``loogle.md`` and ``loogle.csv`` of the results file ``path``; none without it."""
    if not Path(path).is_file():
        return {}
    rows = table(path)
    body = [[md_text(r[k]) if k in TEXT_COLUMNS else r[k] or "" for k in COLUMNS] for r in rows]
    markdown = f"# LooGLE\n\n{NOTE}\n\n" + md_table(list(COLUMNS.values()), body)
    return {
        "loogle.md": markdown.encode(),
        "loogle.csv": csv_text(list(COLUMNS), [[r[k] for k in COLUMNS] for r in rows]).encode(),
    }


def result_lines(result: dict[str, Any]) -> list[str]:
    """A task's metrics (``pipeline.loogle.metrics.evaluation.evaluate``), one line each; the task and
    the data's label with their control characters escaped (``terminal_text``)."""
    task, kind = terminal_text(result["task"]), terminal_text(result["format"])
    lines = [f"task          {task}  ({result['n_questions']} questions; {kind})"]
    for name, value in result["metrics"].items():
        reason = result["unavailable"].get(name)
        lines.append(f"{METRIC_LABELS[name]:<14}{fmt(value)}" + (f"  ({reason})" if reason else ""))
    reorder = result.get("reorder")
    if reorder and reorder["n_questions"]:
        values = ", ".join(f"{k} {fmt(v)}" for k, v in reorder["metrics"].items())
        lines.append(f"reorder       {values} over {reorder['n_questions']} timeline questions")
    elif reorder:
        lines.append(
            "reorder       none: no timeline question (type timeline_reorder, or untyped with an order)"
        )
    return lines


def metrics_summary(result: dict[str, Any]) -> str:
    """`make loogle-metrics`'s summary: the metrics (4 decimals; the results line keeps them whole) and
    where its line went."""
    return "\n".join([*result_lines(result), f"appended to   {terminal_text(result['appended_to'])}"])


def run_summary(results: dict[str, dict[str, Any]], path: Path | None) -> str:
    """`make loogle`'s summary: the tasks it ran (``task=all``: each the data has), then each task's
    metrics, its predictions file, where its line went, and its wall and CPU seconds (CPU: this
    process's, the steadier on a shared machine)."""
    out = [f"tasks         {terminal_text(', '.join(results))}"]
    for result in results.values():
        paths = [f"predictions   {terminal_text(result['predictions'])}"]
        paths.append(f"appended to   {terminal_text(path)}")
        out += [*result_lines(result), *paths]
        if result.get("cpu_seconds") is not None:
            n, wall, cpu = result["n_questions"], result["wall_seconds"], result["cpu_seconds"]
            each = f"{wall / n:.1f} s and {cpu / n:.1f} s a question"
            out.append(f"time          wall {wall:.0f} s, CPU {cpu:.0f} s ({each})")
    return "\n".join(out)
