"""The pictures of `make validate`: the identification figure (paper Fig. 3) and the family scatters."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.formats import fmt
from pipeline.reporting.common import figure, many, plot_text, png
from studies.validation.study import FAMILY_METRICS, QATokens, metric_value


def identification_png(tokens: QATokens, alpha: float, beta: float) -> bytes:
    """Paper Fig. 3 for these documents: LSD of answer and other tokens, LCL of those with LSD > 0.5,
    and both at once with the thresholds."""
    fig = figure((13.0, 3.8))
    ax_lsd, ax_lcl, ax_both = fig.subplots(1, 3)
    groups = (("answer tokens", tokens.answer, "tab:red"), ("other tokens", ~tokens.answer, "tab:blue"))
    bins = np.linspace(min(-2.0, float(tokens.lsd.min())), max(6.0, float(tokens.lsd.max())), 41)
    for label, mask, color in groups:
        ax_lsd.hist(
            tokens.lsd[mask],
            bins=bins,
            density=True,
            alpha=0.55,
            color=color,
            label=f"{label} ({mask.sum()})",
        )
    ax_lsd.axvline(alpha, color="k", ls="--", lw=1)
    ax_lsd.set(
        xlabel="LSD (long - short log-prob)", ylabel="density", title="(a) LSD, question-and-answer tokens"
    )
    high = tokens.lsd > 0.5
    lcl_bins = np.linspace(float(tokens.lcl[high].min()) if high.any() else -10.0, 0.0, 31)
    for label, mask, color in groups:
        ax_lcl.hist(
            tokens.lcl[mask & high],
            bins=lcl_bins,
            alpha=0.55,
            color=color,
            label=f"{label} ({(mask & high).sum()})",
        )
    ax_lcl.axvline(beta, color="k", ls="--", lw=1)
    ax_lcl.set(
        xlabel="LCL (long-context log-prob)", ylabel="tokens", title="(b) LCL of tokens with LSD > 0.5"
    )
    for label, mask, color in reversed(groups):
        ax_both.scatter(tokens.lsd[mask], tokens.lcl[mask], s=6, alpha=0.5, color=color, label=label)
    ax_both.axvline(alpha, color="k", ls="--", lw=1)
    ax_both.axhline(beta, color="k", ls="--", lw=1)
    ax_both.set(xlabel="LSD", ylabel="LCL", title=f"(c) key: LSD > {alpha:g} and LCL > {beta:g}")
    for ax in (ax_lsd, ax_lcl, ax_both):
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return png(fig)


PERPLEXITIES = ("ppl", "longppl", "longppl_soft")


def family_pngs(
    family: list[dict[str, Any]], stats: dict[str, list[dict[str, Any]]], evaluators: list[str]
) -> dict[str, bytes]:
    """One picture per metric: the metric against the answer-token accuracy, one point per member
    (colour: its model; a square: self-evaluation), one panel per evaluator where the metric
    depends on the evaluator; perplexities on a log scale."""
    colours = model_colours(family)
    out = {}
    for metric, (label, dependent) in FAMILY_METRICS.items():
        panels = evaluators if dependent else evaluators[:1]
        fig = figure((5.2 * len(panels), 4.2))
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, evaluator in zip(axes, panels, strict=True):
            member_scatter(ax, family, metric, evaluator, colours)
            r = next(s for s in stats[evaluator] if s["metric"] == metric)
            where = f", evaluator {plot_text(evaluator)}" if dependent else ""
            pearson = f"Pearson {fmt(r['pearson_r'], '+.2f')} (p {fmt(r['pearson_p'], '.2g')})"
            spearman = f"Spearman {fmt(r['spearman_r'], '+.2f')} (p {fmt(r['spearman_p'], '.2g')})"
            ax.set_title(f"{label}{where}\n{pearson}, {spearman}", fontsize=9)
            ax.set(xlabel="answer-token accuracy (synthetic)", ylabel=label)
            if metric in PERPLEXITIES:  # they span orders of magnitude across members
                ax.set_yscale("log")
        fig.tight_layout()
        out[metric] = png(fig)
    return out


def model_colours(family: list[dict[str, Any]]) -> dict[str, str]:
    """One matplotlib colour per model, in the family's order."""
    return {m: f"C{i % 10}" for i, m in enumerate(dict.fromkeys(r["model"] for r in family))}


def member_scatter(ax: Any, family: list[dict[str, Any]], metric: str, evaluator: str, colours: dict) -> None:
    dependent = FAMILY_METRICS[metric][1]
    points = [
        (r, r["token_accuracy"], y, dependent and r["evaluators"][evaluator]["self_evaluation"])
        for r in family
        if (y := metric_value(r, metric, evaluator)) is not None
    ]
    scatter_points(ax, points, colours)


def scatter_points(ax: Any, points: list[tuple[dict[str, Any], float, float, bool]], colours: dict) -> None:
    """One point per member ``(row, x, y, self-evaluation)``: colour its model, a square self-evaluation,
    labelled by its context limit."""
    seen = set()
    for r, x, y, own in points:
        legend = plot_text(r["model"]) + (" (self-evaluation)" if own else "")
        ax.scatter(x, y, color=colours[r["model"]], marker="s" if own else "o", zorder=2,
                   edgecolors="k" if own else "none", label=None if legend in seen else legend)  # fmt: skip
        seen.add(legend)
        short = r["label"].removeprefix(r["model"]).strip() or r["label"]
        ax.annotate(plot_text(short), (x, y), xytext=(4, 4), textcoords="offset points", fontsize=7)
    ax.margins(x=0.2, y=0.1)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)


def loogle_png(family: list[dict[str, Any]], stats: dict[str, Any]) -> bytes:
    """PPL, LongPPL and LongPPL-soft on LooGLE's documents against the mean answer gain, one point per
    member that counts (at least ``min_questions`` counted questions; a square: the LooGLE artifact's
    evaluator); the titles give the correlation across the other members, with its bootstrap p."""
    colours = model_colours(family)
    counts = {m["label"] for m in stats["members"] if m["counts"]}
    across = stats["across"]["own"]["rows"]
    fig = figure((15.6, 4.2))
    for ax, row in zip(fig.subplots(1, len(across)), across, strict=True):
        points = [
            (r, r["loogle"]["gain_bits_per_byte"], r["loogle"][row["metric"]], r["loogle"]["self_evaluation"])
            for r in family
            if r["label"] in counts
        ]
        scatter_points(ax, points, colours)
        spearman = f"Spearman {fmt(row['spearman_r'], '+.2f')} (bootstrap p {fmt(row['bootstrap_p'], '.2g')})"
        members = many(row["n"], "member")
        ax.set_title(f"{row['label']} on LooGLE: {members} but the evaluator's\n{spearman}", fontsize=9)
        ax.set(xlabel="mean answer gain (bits/byte), long-dependency QA", ylabel=row["label"])
        ax.set_yscale("log")
    fig.tight_layout()
    return png(fig)
