"""What every report shares: percentages, Markdown and CSV tables, figures, correlations (a number's
fixed format and a file-name slug are ``pipeline.formats``, for the layers below too).

Outputs are byte-identical for the same inputs: fixed float formats, no timestamps, PNGs without
software metadata.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from pipeline.formats import fmt
from pipeline.marks import made_by

FIGSIZE = (7.0, 5.0)
DPI = 100


# ----------------------------------------------------------------------------------------------
# Numbers and tables


def pct(value: float | None, spec: str = ".1f") -> str:
    """A fraction as a percentage (``0.9188`` -> ``91.9%``)."""
    return "n/a" if value is None else f"{format(100 * value, spec)}%"


def markdown_templates(folder: Path) -> Any:
    """A Jinja2 environment for the Markdown page templates in ``folder``, with the number filters
    ``pct``, ``fmt``, ``g`` and ``many``, and ``md`` and ``code`` for text from users (``md_text``,
    ``md_code``); an undefined name in a template is an error."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # Markdown, not HTML
    )
    env.filters.update(pct=pct, fmt=fmt, g=lambda v: format(v, "g"), md=md_text, code=md_code, many=many)
    return env


def many(n: int, noun: str) -> str:
    """``n`` and the noun, plural unless ``n`` is 1: "1 member", "3 members"."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table; ``|`` in a cell is escaped and a line break becomes a space."""
    lines = [header, ["---"] * len(header), *rows]
    return "".join("| " + " | ".join(md_cell(c) for c in line) + " |\n" for line in lines)


def md_cell(text: str) -> str:
    return " ".join(str(text).splitlines()).replace("|", "\\|")


def md_text(text: str) -> str:
    """Text from a user (a model or benchmark name) as Markdown shows it literally, on one line: the
    characters that start HTML, links, entities, emphasis and code are backslash-escaped (CommonMark).
    Plain names are unchanged."""
    return re.sub(r"([\\`*\[\]<>&])", r"\\\1", " ".join(str(text).splitlines()))


def md_code(text: str) -> str:
    """Inline code for any text: on one line, fenced by more backticks than it contains."""
    one_line = " ".join(str(text).splitlines())
    longest = max((len(run) for run in re.findall(r"`+", one_line)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if one_line.startswith("`") or one_line.endswith("`") else ""
    return f"{fence}{pad}{one_line}{pad}{fence}"


# A spreadsheet runs a cell that starts with one of these as a formula (OWASP, "CSV Injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?%?")


def csv_cell(cell: str | None) -> str | None:
    """A cell as a spreadsheet shows it, never runs it: text that starts like a formula gets a leading
    single quote (OWASP's advice); a number (``-0.25``, ``+1e-05``) stays a number; empty is None."""
    if cell is None or cell == "":
        return None
    if cell.startswith(FORMULA_STARTS) and not NUMBER.fullmatch(cell):
        return "'" + cell
    return cell


def csv_text(header: list[str], rows: list[list[str | None]]) -> str:
    """CSV of text cells (format numbers first); empty or None cells are written empty, and a text
    cell that a spreadsheet would run as a formula is neutralised (``csv_cell``)."""
    import polars as pl  # a table is built here: imported where it is used

    cells = [[csv_cell(c) for c in row] for row in rows]
    header = [csv_cell(h) or "" for h in header]
    return pl.DataFrame(cells, schema=dict.fromkeys(header, pl.String), orient="row").write_csv()


def display_path(path: str | Path) -> str:
    """A path relative to the working directory when under it (outputs do not depend on the checkout)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# ----------------------------------------------------------------------------------------------
# Figures (matplotlib's object API: no global state, no display needed)


def figure(size: tuple[float, float] = FIGSIZE) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def png(fig: Any, command: str | None = None) -> bytes:
    """The figure as PNG bytes, marked as ``command``'s (its text ``Software``: ``pipeline.marks``), or
    with no ``Software`` at all (not matplotlib's version: the same bytes on every install)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": command and made_by(command)})
    return buffer.getvalue()


def plot_text(text: str) -> str:
    """Text from a user as a plot shows it literally: matplotlib reads ``$...$`` as math (and fails on a
    lone ``$``), so every ``$`` is escaped."""
    return str(text).replace("$", r"\$")


def labelled_scatter(ax: Any, xs: list[float], ys: list[float], labels: list[str]) -> None:
    ax.scatter(xs, ys, color="tab:blue", zorder=2)
    for x, y, label in zip(xs, ys, labels, strict=True):
        ax.annotate(plot_text(label), (x, y), xytext=(4, 4), textcoords="offset points", fontsize=8)
    ax.margins(x=0.2, y=0.1)  # room for the labels
    ax.grid(True, alpha=0.3)
