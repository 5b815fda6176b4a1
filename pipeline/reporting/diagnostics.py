"""Each document's diagnostics as `make keytokens`'s summary and the key-token pages show them: the
per-document columns of ``pipeline.artifact.columns`` (those `make curate` writes), each in one fixed
format (``shown``). The summary shows a row per document for up to ``TABLE_DOCUMENTS`` documents, else
each column's minimum, median and maximum across the documents."""

from __future__ import annotations

import html
from typing import Any

import numpy as np

from pipeline.artifact.columns import COLUMNS
from pipeline.formats import fmt, terminal_text

# Each column shown: its label and its format ("%": a percentage; LSD in nats).
SHOWN = {
    "longppl_scored_tokens": ("scored tokens", "d"),
    "longppl_key_ratio": ("key ratio", ".2%"),
    "longppl_lsd_p50": ("LSD p50", ".3f"),
    "longppl_lsd_p90": ("LSD p90", ".3f"),
    "longppl_lsd_p99": ("LSD p99", ".3f"),
    "longppl_mean_positive_lsd": ("mean LSD+", ".4f"),
    "longppl_mean_positive_lsd_first": ("first third", ".4f"),
    "longppl_mean_positive_lsd_middle": ("middle third", ".4f"),
    "longppl_mean_positive_lsd_last": ("last third", ".4f"),
    "longppl_soft_mass": ("soft mass", ".3f"),
    "longppl_ppl": ("PPL", ".3f"),
}
SUMMARY = (
    "longppl_key_ratio",
    "longppl_lsd_p50",
    "longppl_lsd_p90",
    "longppl_lsd_p99",
    "longppl_mean_positive_lsd",
)
INDEX = ("longppl_key_ratio", "longppl_mean_positive_lsd")
TABLE_DOCUMENTS = 20
LABEL = "diagnostics "  # the summary's label column
MISSING = "-"  # a value no token defines (a document of at most K tokens)


def shown(name: str, value: Any) -> str:
    """One column's value in its format."""
    return fmt(value, SHOWN[name][1], MISSING)


def summary_lines(columns: dict[str, dict[str, Any]]) -> list[str]:
    """The summary's lines for the documents' columns (by document id): none for no document."""
    if not columns:
        return []
    if len(columns) > TABLE_DOCUMENTS:
        return spread_lines(columns)
    ids = {doc_id: terminal_text(doc_id) for doc_id in columns}
    width = max(len("document"), *(len(shown_id) for shown_id in ids.values()))
    lines = [f"{LABEL}{'document':<{width}}" + "".join(f"{SHOWN[n][0]:>11}" for n in SUMMARY)]
    for doc_id, row in columns.items():
        lines.append(f"{LABEL}{ids[doc_id]:<{width}}" + "".join(f"{shown(n, row[n]):>11}" for n in SUMMARY))
    return lines


def spread_lines(columns: dict[str, dict[str, Any]]) -> list[str]:
    """Each summary column's minimum, median and maximum across the documents that define it."""
    lines = [f"{LABEL}{len(columns)} documents: each column's min, median and max (every page shows its own)"]
    for name in SUMMARY:
        values = [row[name] for row in columns.values() if row[name] is not None]
        spread = np.quantile(values, [0.0, 0.5, 1.0]).tolist() if values else [None] * 3
        cells = ", ".join(
            f"{k} {shown(name, v)}" for k, v in zip(("min", "median", "max"), spread, strict=True)
        )
        lines.append(f"{LABEL}{SHOWN[name][0]:<10} {cells}")
    return lines


def header_cells(names: tuple[str, ...]) -> str:
    """HTML header cells for ``names``, each column's meaning on hover."""
    return "".join(f'<th title="{html.escape(COLUMNS[n])}">{SHOWN[n][0]}</th>' for n in names)


def page_table(row: dict[str, Any]) -> str:
    """A document's diagnostics row, as an HTML table for its page."""
    names = tuple(SHOWN)
    cells = "".join(f"<td>{shown(n, row[n])}</td>" for n in names)
    return f'<table class="diagnostics"><tr>{header_cells(names)}</tr><tr>{cells}</tr></table>'
