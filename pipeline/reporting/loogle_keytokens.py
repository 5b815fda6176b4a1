"""The figure of ``make loogle-keytokens`` (``pipeline.loogle.evidence.keytoken_rates``): the LSD of scored
tokens inside and outside LooGLE's located evidence, and the mean LSD of each question's last evidence
span against how far back its earliest evidence lies (the paper's Figure 3 on real text)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from pipeline.files import write_bytes_atomic
from pipeline.formats import fmt, terminal_text
from pipeline.outputs import Checked
from pipeline.reporting.common import figure, plot_text, png


class Analysis(Protocol):
    """What the plot draws of ``pipeline.loogle.evidence.keytoken_rates.Analysis``: its report and the
    LSD of the scored tokens inside and outside the evidence."""

    report: dict[str, Any]
    lsd_inside: np.ndarray
    lsd_outside: np.ndarray


def draw_distributions(ax: Any, analysis: Analysis) -> None:
    """The two LSD distributions as densities on shared bins, with the test's numbers."""
    inside, outside = analysis.lsd_inside, analysis.lsd_outside
    both = np.concatenate([inside, outside])
    low, high = np.percentile(both, [0.5, 99.5]) if len(both) else (0.0, 1.0)
    bins = np.linspace(min(low, -0.5), max(high, 0.5), 60)
    for values, name in ((outside, "outside"), (inside, "in evidence")):
        ax.hist(
            np.clip(values, bins[0], bins[-1]),
            bins,
            density=True,
            alpha=0.5,
            label=f"{name} (n={len(values)})",
        )
    ax.set_yscale("log")
    test = analysis.report["lsd"]
    ax.set_title(
        f"mean LSD in - out = {fmt(test['difference'], '.4f')}; "
        f"shift null {fmt(test['null_mean'], '.4f')} ± {fmt(test['null_sd'], '.4f')}, "
        f"p(two-sided) = {fmt(test['p_two_sided'], '.3g')}",
        fontsize=9,
    )
    ax.set_xlabel("LSD (nats; clipped to the 0.5-99.5 percentiles)")
    ax.set_ylabel("density (log)")
    ax.legend(fontsize=8)


def draw_dependency(ax: Any, analysis: Analysis) -> None:
    """Mean LSD of each question's last evidence span against its dependency distance, and K."""
    dep = analysis.report["dependency"]
    rows = dep["questions"]
    ax.scatter([r["distance_tokens"] for r in rows], [r["mean_lsd"] for r in rows], color="tab:blue")
    if dep.get("K"):
        ax.axvline(dep["K"], color="grey", linestyle="--", label=f"K = {dep['K']} (short context)")
        ax.legend(fontsize=8)
    rho, p = fmt(dep["spearman_r"], ".3f"), fmt(dep["spearman_p"], ".3g")
    ax.set_title(f"Spearman rho = {rho}, p = {p}, n = {dep['n']} questions", fontsize=9)
    ax.set_xlabel("tokens from the earliest evidence to the last evidence span")
    ax.set_ylabel("mean LSD of the last span's tokens")


def evidence_png(analysis: Analysis, name: str) -> bytes:
    fig = figure((8.0, 9.0))
    top, bottom = fig.subplots(2, 1)
    draw_distributions(top, analysis)
    draw_dependency(bottom, analysis)
    fig.suptitle(plot_text(f"key tokens against LooGLE evidence: {name}"), fontsize=10)
    fig.tight_layout()
    return png(fig, "loogle-keytokens")


def write_evidence_plot(analysis: Analysis, name: str, plot: Checked) -> None:
    """The figure, where its output was checked (``pipeline.outputs``)."""
    write_bytes_atomic(plot.path, evidence_png(analysis, name), plot)


def table_lines(report: dict[str, Any]) -> list[str]:
    """The printed table: evidence counts, both tests, the dependency correlation."""
    ev, dep = report["evidence"], report["dependency"]
    lines = [
        f"evidence      {ev['strings']} strings: {ev['used']} used, {ev['unlocated']} unlocated, "
        f"{ev['beyond_kept_text']} beyond the kept text (excluded)",
        f"{'':13} {'n in':>6} {'n out':>6} {'in':>9} {'out':>9} {'in-out':>9} {'null':>17} "
        f"{'p>':>7} {'p2':>7}",
    ]
    for name in ("lsd", "key_rate"):
        t = report[name]
        null = f"{t['null_mean']:+.4f}±{t['null_sd']:.4f}"
        lines.append(
            f"{name:13} {t['n_inside']:6d} {t['n_outside']:6d} "
            f"{t['inside_mean']:9.4f} {t['outside_mean']:9.4f} "
            f"{t['difference']:+9.4f} {null:>17} {t['p_greater']:7.4f} {t['p_two_sided']:7.4f}"
        )
    rho = "n/a" if dep["spearman_r"] is None else f"{dep['spearman_r']:+.3f} (p {dep['spearman_p']:.3g})"
    lines.append(
        f"dependency    Spearman(distance, mean LSD of the last span) = {rho}, n = {dep['n']} questions "
        f"({dep['no_scored_token_in_last_span']} without a scored token left out)"
    )
    return lines


def summary(result: dict[str, Any], out: Path, plot: Path) -> str:
    """What `make loogle-keytokens` prints: the table and where the JSON and the figure went."""
    paths = [f"written       {terminal_text(out)}", f"plot          {terminal_text(plot)}"]
    return "\n".join([*table_lines(result), *paths])
