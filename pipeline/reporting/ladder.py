"""The context ladder's picture, in the forgetting curve's style, and its console summary.

LongPPL (blue, with its bootstrap band), LongPPL-soft and PPL against the context limit W (log axis,
full context at the right); the rungs within tolerance of the full-context LongPPL shaded green from
the effective length on, those below it red, rungs that limit no key token hatched; the tolerance as a
dotted line. A model with a forgetting curve gets it below, on the same page, and its coarse memory
as a dotted line on the ladder. ``curves_png``: every model's ladder on one artifact, for the
leaderboard. Byte-identical for the same rows (no software metadata).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.files import write_bytes_atomic
from pipeline.formats import fmt
from pipeline.marks import picture
from pipeline.outputs import Output, check
from pipeline.reporting.common import figure, png
from pipeline.reporting.forgetting import draw_forgetting
from pipeline.results.forgetting import memory_text
from pipeline.results.ladder import reading_text

WIDTH = 12.0


def positions(row: dict[str, Any]) -> list[float]:
    """The x of each rung: its context limit, full context one doubling right of the largest."""
    limits = [r["context_limit"] for r in row["rungs"][:-1]]
    return [*limits, 2 * max(limits)]


def _regions(ax: Any, row: dict[str, Any], xs: list[float]) -> None:
    """Red below the effective length, green from it on, hatching over rungs that limit no key token."""
    rungs, effective = row["rungs"], row["effective"]
    low, high = xs[0] / 1.3, xs[-1] * 1.3
    if effective["length"] is not None or effective["censored"] == "right":
        at = (
            xs[-1]
            if effective["length"] is None
            else xs[[r["context_limit"] for r in rungs].index(effective["length"])]
        )
        edge = at / 2**0.5 if at != xs[0] else low
        ax.axvspan(low, edge, color="tab:red", alpha=0.08, lw=0, label="below the effective length")
        ax.axvspan(
            edge,
            high,
            color="tab:green",
            alpha=0.08,
            lw=0,
            label="effective length on: within tolerance up to full context",
        )
    dead = [x for x, r in zip(xs[:-1], rungs[:-1], strict=True) if not r["informative"]]
    if dead:
        ax.axvspan(dead[0] / 2**0.5, xs[-1] / 2**0.5, facecolor="none", hatch="//", edgecolor="0.6", lw=0,
                   label="limits no key token (= full context on them)")  # fmt: skip


def draw_ladder(ax: Any, row: dict[str, Any], forgetting: dict[str, Any] | None = None) -> None:
    """The ladder of one results row on ``ax``, with its title and legend."""
    rungs, effective = row["rungs"], row["effective"]
    xs = positions(row)
    _regions(ax, row, xs)
    longppl = [r["corpus"]["longppl"] for r in rungs]
    if None not in longppl:
        ax.plot(xs, longppl, color="tab:blue", marker="o", ms=4, label="LongPPL")
        bands = [r["longppl_band"] or [v, v] for r, v in zip(rungs, longppl, strict=True)]
        ax.fill_between(xs, [b[0] for b in bands], [b[1] for b in bands], color="tab:blue", alpha=0.15,
                        label=f"LongPPL, {effective['confidence']:.0%} band over documents")  # fmt: skip
        tolerance = effective["tolerance"]
        ax.axhline(longppl[-1] * (1 + tolerance), color="tab:green", ls=":", lw=1,
                   label=f"full-context LongPPL + {tolerance:.0%} (tolerance)")  # fmt: skip
    for key, color, label in (("longppl_soft", "tab:purple", "LongPPL-soft"), ("ppl", "0.4", "PPL")):
        values = [r["corpus"][key] for r in rungs]
        if None not in values:
            ax.plot(xs, values, color=color, marker=".", ls="--", lw=1, label=label)
    if forgetting is not None:
        memory = forgetting["memory"]
        label = f"forgetting curve: coarse memory {memory_text(memory, 'coarse')} (copy distance)"
        ax.axvline(memory["coarse"], color="darkorange", ls=":", lw=1.2, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(xs, [str(x) for x in xs[:-1]] + ["full"])
    ax.set_xlim(xs[0] / 1.3, xs[-1] * 1.3)
    ax.set_xlabel("context limit W in tokens (rung W: each token sees W/2 to W tokens; full: all before it)")
    ax.set_ylabel("perplexity (log scale)")
    text, interval = reading_text(effective)
    corpus = rungs[-1]["corpus"]
    ax.set_title(
        f"{row['model_name']}: effective context length {text} tokens at {effective['tolerance']:.0%} "
        f"tolerance ({effective['confidence']:.0%} interval {interval})\nartifact {row['artifact']['name']}\n"
        f"{corpus['n_documents']} documents, {corpus['n_key_tokens']} key tokens; bootstrap over documents, "
        f"{effective['bootstrap']} resamples, seed {effective['seed']}",
        fontsize=10,
    )
    plain_numbers(ax)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def plain_numbers(ax: Any) -> None:
    """Log-axis ticks as plain numbers (60, not 6 x 10^1)."""
    from matplotlib.ticker import FuncFormatter

    for axis in (ax.yaxis,):
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def ladder_png(row: dict[str, Any], forgetting: dict[str, Any] | None = None) -> bytes:
    """The PNG of one results row; with a forgetting curve, both on one page."""
    fig = figure((WIDTH, 10.0 if forgetting else 5.0))
    if forgetting is None:
        draw_ladder(fig.add_subplot(), row)
    else:
        top, bottom = fig.subplots(2, 1)
        draw_ladder(top, row, forgetting)
        draw_forgetting(bottom, forgetting)
    fig.tight_layout()
    return png(fig, "ladder")


def write_plot(row: dict[str, Any], forgetting: dict[str, Any] | None, path: Path) -> None:
    """The picture at ``path`` (in ``plot_dir``), only over a picture of this command's
    (``pipeline.outputs``)."""
    checked = check(Output("plot_dir", path, picture("ladder")))
    write_bytes_atomic(path, ladder_png(row, forgetting), checked)


def curves_png(rows: list[dict[str, Any]], artifact: str) -> bytes:
    """Every model's LongPPL relative to its full-context LongPPL against the context limit."""
    fig = figure((WIDTH * 0.75, 5.0))
    ax = fig.add_subplot()
    ticks: dict[float, str] = {}
    for row in rows:
        longppl = [r["corpus"]["longppl"] for r in row["rungs"]]
        if None in longppl:
            continue
        xs = positions(row)
        ticks.update({x: str(x) for x in xs[:-1]})
        text, interval = reading_text(row["effective"])
        ax.plot(xs, [v / longppl[-1] for v in longppl], marker="o", ms=4,
                label=f"{row['model_name']}: effective length {text} {interval}")  # fmt: skip
        ax.annotate("full", (xs[-1], 1.0), xytext=(4, -10), textcoords="offset points", fontsize=8)
    for tolerance in sorted({row["effective"]["tolerance"] for row in rows}):
        ax.axhline(1 + tolerance, color="tab:green", ls=":", lw=1, label=f"tolerance {tolerance:.0%}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    if ticks:
        ax.set_xticks(sorted(ticks), [ticks[x] for x in sorted(ticks)])
    ax.set_xlabel("context limit W in tokens (full context at the right of each curve)")
    ax.set_ylabel("LongPPL / full-context LongPPL")
    ax.set_title(f"context ladder on {artifact}", fontsize=9)
    plain_numbers(ax)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    return png(fig, "leaderboard")


def summary_text(row: dict[str, Any], results: Path) -> str:
    """The console report of one run: the rungs, the effective length and its interval."""
    effective, rungs = row["effective"], row["rungs"]
    corpus = rungs[-1]["corpus"]
    lines = [
        f"model          {row['model_name']}  (artifact {row['artifact']['name']}; {corpus['n_documents']} "
        f"documents, {corpus['n_key_tokens']} key tokens)",
        "  rung       PPL    LongPPL [band]                 LongPPL-soft  key bits/byte  delta    recovered"
        "  key tokens limited  docs = full  seconds",
    ]
    lines += [rung_text(r) for r in rungs]
    text, interval = reading_text(effective)
    lines.append(
        f"effective length  {text} tokens at {effective['tolerance']:.0%} tolerance, "
        f"{effective['confidence']:.0%} interval {interval} ({effective['resamples_used']} of "
        f"{effective['bootstrap']} resamples of {corpus['n_documents']} documents, seed {effective['seed']})"
    )
    if effective["undefined"]:
        lines.append(f"                  undefined: {effective['undefined']}")
    elif corpus["n_documents"] < 10:
        lines.append(
            f"                  only {corpus['n_documents']} documents: the interval is a rough guide"
        )
    if effective["shares"]:
        names = [str(r["context_limit"] or "full") for r in rungs]
        shares = ", ".join(f"{n}: {s:.0%}" for n, s in zip(names, effective["shares"], strict=True) if s)
        lines.append(f"resamples at    {shares}")
    lines.append("by tolerance    " + "; ".join(f"{r['tolerance']:.0%}: {' '.join(reading_text(r))}"
                                                  for r in effective["by_tolerance"]))  # fmt: skip
    lines += [f"wall time      {row['wall_seconds']:.0f} s", f"plot           {row['plot']}",
              f"appended to    {results}"]  # fmt: skip
    return "\n".join(lines)


def rung_text(r: dict[str, Any]) -> str:
    c, band = r["corpus"], r["longppl_band"]
    band_text = "" if band is None else f"[{fmt(band[0], '.2f')}, {fmt(band[1], '.2f')}]"
    recovered = "" if r["recovered"] is None else f"{r['recovered'] + 0.0:.0%}"
    delta = "" if r["delta"] is None else f"{r['delta']:+.3f}"
    return (
        f"  {r['context_limit'] or 'full'!s:>5}  {fmt(c['ppl'], '.4f'):>8}  {fmt(c['longppl'], '.4f'):>9} "
        f"{band_text:<20}  {fmt(c['longppl_soft'], '.4f'):>12}  {fmt(c['key_bpb'], '.4f'):>13}  {delta:>7}  "
        f"{recovered:>9}  {r['n_key_limited']:>18}  {r['copied_documents']:>11}  {r['seconds']:>7.1f}"
    )
