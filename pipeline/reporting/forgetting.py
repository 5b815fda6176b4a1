"""The forgetting curve's picture, in the paper's style (Liu et al., EMNLP 2024, Fig. 1), and its
console summary.

Copy accuracy (orange) and LM accuracy (blue) against the length L of S, with +-1 std bands; the
fine-grained memory region shaded green, the coarse-grained one blue, the rest (amnesia) red; the
claimed context marked where the whole input fills it (L = (context - 3) / 2, the reference's
"half support length") and, when the axis reaches it, at L = context; lengths whose input exceeds
the context hatched. Byte-identical for the same row (no software metadata).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.files import write_bytes_atomic
from pipeline.formats import file_slug
from pipeline.marks import picture
from pipeline.outputs import Output, check
from pipeline.reporting.common import figure, plot_text, png
from pipeline.results.forgetting import memory_text

FIGSIZE = (12.0, 5.0)


def plot_name(row: dict[str, Any]) -> str:
    """``<model>--<source>-<grid>-n<n>-R<R>-L<max>-seed<seed>--<result id>[-incomplete].png``: runs of
    other weights under one name, or a run with failed lengths, never overwrite another run's picture."""
    slug = file_slug(row["model_name"], "model")
    s = row["settings"]
    settings = f"{s['source']}-{s['grid']}-n{s['n']}-R{s['R']}-L{s['max_length']}-seed{s['seed']}"
    incomplete = "" if row["complete"] else "-incomplete"
    return f"{slug}--{settings}--{row['result_id'][:8]}{incomplete}.png"


def _regions(ax: Any, memory: dict[str, Any], low: float, high: float) -> None:
    """Shade fine-grained (green), coarse-grained (blue) and amnesia (red) regions, as Fig. 1."""
    fine = high if memory["fine_censored"] else memory["fine"]
    coarse = high if memory["coarse_censored"] else max(memory["coarse"], fine)  # unknown beyond: no amnesia
    spans = [(low, fine, "tab:green", "fine-grained memory"), (fine, coarse, "tab:blue", "coarse-grained")]
    spans.append((coarse, high, "tab:red", "amnesia"))
    for a, b, color, label in spans:
        if b > a and b > low:
            ax.axvspan(max(a, low), b, color=color, alpha=0.1, lw=0, label=label)


def _padded(low: float, high: float, log: bool) -> tuple[float, float]:
    """The x-axis range: the points with a small margin (a single point gets a visible range)."""
    if log:
        return low / 1.15, high * 1.15
    pad = max((high - low) * 0.02, 1.0)
    return max(0.0, low - pad), high + pad


def _context_marks(ax: Any, settings: dict[str, Any], points: list[dict[str, Any]], high: float) -> None:
    """Mark where the input fills the claimed context and, when the axis reaches it, L = context."""
    context = settings["context"]
    fills = (context - 3) / 2
    if fills <= high:
        ax.axvline(fills, color="tab:red", ls="--", lw=1, label=f"input = claimed context ({context} tokens)")
    if context <= high:
        ax.axvline(context, color="darkred", ls=":", lw=1, label=f"L = claimed context ({context})")
    if any(p["beyond_context"] for p in points):
        ax.axvspan(fills, high, facecolor="none", hatch="//", edgecolor="0.6", lw=0, label="beyond context")


def forgetting_png(row: dict[str, Any]) -> bytes:
    """The PNG of one results row."""
    fig = figure(FIGSIZE)
    draw_forgetting(fig.add_subplot(), row)
    fig.tight_layout()
    return png(fig, "forgetting-curve")


def draw_forgetting(ax: Any, row: dict[str, Any]) -> None:
    """The curve of one results row on ``ax``, with its title and legend."""
    settings, memory = row["settings"], row["memory"]
    points = [p for p in row["points"] if p["error"] is None]
    xs = [p["length"] for p in points]
    log = settings["grid"] == "log"
    fills = (settings["context"] - 3) / 2
    right = max(max(xs, default=1), fills if fills <= max(xs, default=1) * 1.05 else 0)
    low, high = _padded(min(xs, default=1), right, log)
    _regions(ax, memory, low, high)
    for key, color, label in (("copy", "tab:orange", "copy accuracy"), ("lm", "tab:blue", "LM accuracy")):
        mean = [p[f"{key}_mean"] for p in points]
        std = [p[f"{key}_std"] for p in points]
        ax.plot(xs, mean, color=color, marker="o", ms=3, label=label)
        low_band = [max(0.0, m - s) for m, s in zip(mean, std, strict=True)]
        high_band = [min(1.0, m + s) for m, s in zip(mean, std, strict=True)]
        ax.fill_between(xs, low_band, high_band, color=color, alpha=0.15)
    ax.axhline(memory["fine_threshold"], color="tab:green", ls=":", lw=0.8, label="99% (fine-grained)")
    _context_marks(ax, settings, row["points"], high)
    if log:
        ax.set_xscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("L: tokens of S (the copy distance; inputs have 2L+3 tokens)")
    ax.set_ylabel("teacher-forced top-1 accuracy (second half of the second S)")
    off_axis = "" if fills <= high else f"; inputs fill it at L={fills:.0f}, right of this axis"
    ax.set_title(
        f"{plot_text(row['model_name'])}: fine memory {memory_text(memory, 'fine')}, "
        f"coarse memory {memory_text(memory, 'coarse')} tokens "
        f"(claimed context {settings['context']} tokens{off_axis})\n"
        f"{row['text']['source']} text, {settings['grid']} grid, n={settings['n']}, R={settings['R']}, "
        f"seed={settings['seed']}, {settings['dtype']}",
        fontsize=10,
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def write_plot(row: dict[str, Any], path: Path) -> None:
    """The picture at ``path`` (in ``plot_dir``), only over a picture of this command's
    (``pipeline.outputs``)."""
    checked = check(Output("plot_dir", path, picture("forgetting-curve")))
    write_bytes_atomic(path, forgetting_png(row), checked)


def summary_text(row: dict[str, Any], results: Path) -> str:
    """The console report of one run: a table of the points and the memory lengths."""
    s, memory = row["settings"], row["memory"]
    lines = [
        f"model          {row['model_name']}  (claimed context {s['context']} tokens)",
        f"grid           {s['grid']}, n={s['n']}, R={s['R']}, seed={s['seed']}; {row['text']['source']} text",
        "     L  inputs   copy acc (std)    LM acc (std)      p",
    ]
    for p in row["points"]:
        if p["error"] is not None:
            lines.append(f"{p['length']:>6}  {p['input_tokens']:>6}   failed: {p['error']}")
            continue
        pv = "n/a" if p["p_value"] is None else f"{p['p_value']:.2g}"
        lines.append(
            f"{p['length']:>6}  {p['input_tokens']:>6}   {p['copy_mean']:.4f} ({p['copy_std']:.4f})  "
            f"{p['lm_mean']:.4f} ({p['lm_std']:.4f})  {pv}"
            + ("  beyond context" if p["beyond_context"] else "")
        )
    lines += [
        f"fine memory    {memory_text(memory, 'fine')} tokens "
        f"(copy accuracy > {memory['fine_threshold']:.0%})",
        f"coarse memory  {memory_text(memory, 'coarse')} tokens (copy accuracy >= LM accuracy + "
        f"{memory['coarse_margin'] * 100:.0f} point); '>': still so at the largest length measured",
        f"wall time      {row['wall_seconds']:.0f} s",
        f"plot           {row['plot']}",
        f"appended to    {results}",
    ]
    return "\n".join(lines)
