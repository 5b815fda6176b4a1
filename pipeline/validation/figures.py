"""The pictures of `make validate`: the identification figure (paper Fig. 3) and the family scatter."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.reporting.common import figure, fmt, labelled_scatter, png
from pipeline.results import METRICS
from pipeline.validation.study import QATokens


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


def family_png(family: list[dict[str, Any]], stats: list[dict[str, Any]]) -> bytes:
    """Each metric against the retrieval accuracy, one labelled point per context limit W."""
    by_metric = {r["metric"]: r for r in stats}
    shown = {**METRICS, "answer_ppl": "answer-token PPL"}
    fig = figure((4.0 * len(shown), 3.6))
    xs = [r["token_accuracy"] for r in family]
    for ax, (metric, label) in zip(fig.subplots(1, len(shown)), shown.items(), strict=True):
        labelled_scatter(ax, xs, [r[metric] for r in family], [r["label"] for r in family])
        r = by_metric[metric]
        ax.set(xlabel="answer-token accuracy (synthetic)", ylabel=label)
        ax.set_title(f"{label}: Pearson {fmt(r['pearson_r'], '.2f')}, Spearman {fmt(r['spearman_r'], '.2f')}",
                     fontsize=9)  # fmt: skip
    fig.tight_layout()
    return png(fig)
