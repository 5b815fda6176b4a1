"""``docs/reports/longce-demo.md`` from `make longce-demo`'s results: this module builds the numbers,
tables and training curves; the prose lives in the template ``longce_report.md.j2`` beside it and states
what the numbers say (which run gained more, by how much), whatever the outcome."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pipeline.formats import fmt
from pipeline.provenance import machine, run_stamp
from pipeline.reporting.common import figure, markdown_templates, md_table, pct, png

CURVE_KEYS = (
    "step",
    "loss",
    "ce",
    "weight_mean",
    "weight_max",
    "clamped_fraction",
    "learning_rate",
    "seconds",
)
LABELS = {"before": "base model", "ce": "after CE", "self": "after LongCE (self)"}
RUNS = {"ce": "CE", "self": "LongCE (self)"}
COLORS = {"ce": "tab:blue", "self": "tab:red"}
TEMPLATE = "longce_report.md.j2"


def curves_png(results: dict[str, Any]) -> bytes:
    """Training curves of both runs: the objective, the plain CE of the same tokens, the weights."""
    fig = figure((13.0, 3.8))
    ax_loss, ax_ce, ax_w = fig.subplots(1, 3)
    for source, label in RUNS.items():
        curve = results[source]["curve"]
        steps = [r["step"] for r in curve]
        ax_loss.plot(steps, [r["loss"] for r in curve], color=COLORS[source], marker=".", label=label)
        ax_ce.plot(steps, [r["ce"] for r in curve], color=COLORS[source], marker=".", label=label)
    curve = results["self"]["curve"]
    steps = [r["step"] for r in curve]
    ax_w.plot(steps, [r["weight_mean"] for r in curve], color="tab:red", marker=".", label="mean weight")
    share = ax_w.twinx()
    share.plot(steps, [100 * r["clamped_fraction"] for r in curve], color="tab:orange", ls="--")
    share.set_ylabel("tokens at gamma (%, dashed)", color="tab:orange")
    ax_loss.set(xlabel="step", ylabel="training objective", title="(a) the loss each run minimises")
    ax_ce.set(xlabel="step", ylabel="mean NLL (nats)", title="(b) plain CE of the same tokens")
    ax_w.set(xlabel="step", ylabel="weight", title="(c) LongCE (self): its weights")
    for ax in (ax_loss, ax_ce, ax_w):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return png(fig)


def outcome_table(results: dict[str, Any]) -> str:
    header = ["model", "answer-token acc.", "exact match", "answer PPL", "other QA PPL"]
    header += ["GovReport PPL", "LongPPL", "LongPPL-soft"]
    rows = []
    for key, label in LABELS.items():
        r = results["before"] if key == "before" else results[key]["after"]
        values = ("answer_ppl", "other_ppl", "ppl", "longppl", "longppl_soft")
        rows.append(
            [label, pct(r["token_accuracy"]), pct(r["answer_exact_match"])]
            + [fmt(r[k], ".3f") for k in values]
        )
    return md_table(header, rows)


def training_table(results: dict[str, Any]) -> str:
    header = ["run", "steps", "tokens per step", "seconds per step", "CPU s per step", "final objective"]
    header += ["final plain CE", "mean weight", "max weight", "share at gamma"]
    rows = []
    for source, label in RUNS.items():
        r, curve = results[source], results[source]["curve"]
        n = len(curve)
        speed = [
            f"{r['tokens_per_step']:.0f}",
            f"{r['seconds_per_step']:.1f}",
            f"{r['cpu_seconds_per_step']:.1f}",
        ]
        final = [fmt(curve[-1]["loss"], ".3f"), fmt(curve[-1]["ce"], ".3f")]
        weights = [
            fmt(sum(c["weight_mean"] for c in curve) / n, ".3f"),
            fmt(max(c["weight_max"] for c in curve), ".2f"),
        ]
        rows.append(
            [
                label,
                str(r["steps"]),
                *speed,
                *final,
                *weights,
                pct(sum(c["clamped_fraction"] for c in curve) / n),
            ]
        )
    return md_table(header, rows)


def reading(results: dict[str, Any]) -> dict[str, Any]:
    """The numbers the prose reads, by name."""
    before = results["before"]
    gain = {s: results[s]["after"]["token_accuracy"] - before["token_accuracy"] for s in RUNS}
    better = (
        "LongCE (self)" if gain["self"] > gain["ce"] else "CE" if gain["ce"] > gain["self"] else "neither"
    )
    return {
        "before": before,
        "after": {s: results[s]["after"] for s in RUNS},
        "gain": {s: 100 * g for s, g in gain.items()},
        "better": better,
        "difference": 100 * (gain["self"] - gain["ce"]),
        "cost_ratio": results["self"]["cpu_seconds_per_step"] / results["ce"]["cpu_seconds_per_step"],
    }


def render(results: dict[str, Any], timing: dict[str, dict[str, float]], docs_dir: Path, report: Path) -> str:
    """The whole page; the picture's link is relative to ``report``."""
    env = markdown_templates(Path(__file__).parent)
    changed = results.get("changed_from_defaults") or {}
    context = {
        "s": results["settings"],
        "changed": ", ".join(f"{k}={v}" for k, v in changed.items()),
        "total": timing["total"],
        "phases": ", ".join(
            f"{k} {v['wall']:.0f} s ({v['cpu']:.0f} s CPU)" for k, v in timing.items() if k != "total"
        ),
        "machine": machine(),
        "stamp": run_stamp(),
        "outcome_table": outcome_table(results),
        "training_table": training_table(results),
        "picture": Path(os.path.relpath(docs_dir / "curves.png", report.parent)).as_posix(),
        **reading(results),
    }
    return env.get_template(TEMPLATE).render(context)
