"""The tables and numbers of the validation report's LooGLE section (``report.md.j2`` reads them)."""

from __future__ import annotations

from typing import Any

from pipeline.formats import fmt
from pipeline.reporting.common import md_table


def context(results: dict[str, Any]) -> dict[str, Any] | None:
    """What the template reads of the LooGLE target (None: the run had none)."""
    loogle = results.get("loogle")
    if loogle is None:
        return None
    family, stats = results["family"], loogle["correlations"]
    counted = stats["questions"]
    return {
        **loogle,
        "stats": stats,
        "by_metric": {r["metric"]: r for r in stats["rows"]},
        "by_metric_common": {r["metric"]: r for r in stats["common"]["rows"]},
        "fewest": min(counted, default=0),
        "most": max(counted, default=0),
        "single": [r["label"] for r in family if r["loogle"]["n_counted"] == 1],
        "tables": {
            "members": members_table(family),
            "types": types_table(family),
            "correlations": correlation_table(stats["rows"]),
            "common": correlation_table(stats["common"]["rows"]),
        },
    }


def members_table(family: list[dict[str, Any]]) -> str:
    """Per member: its questions counted and excluded, the mean answer gain, and its scores on LooGLE."""
    header = ["member", "context (tokens)", "counted / questions",
              "excluded: no evidence located / evidence outside / no room",
              "answer gain, nats", "answer gain, bits/byte (± s.e.)", "gain > 0", "PPL", "LongPPL",
              "LongPPL-soft", "key tokens", "documents truncated"]  # fmt: skip
    rows = []
    for r in family:
        g = r["loogle"]
        se = (
            f" (± {fmt(g['gain_bits_per_byte_se'], '.3f')})" if g["gain_bits_per_byte_se"] is not None else ""
        )
        rows.append([
            r["label"] + (" (self)" if g["self_evaluation"] else ""), str(g["limit"]),
            f"{g['n_counted']} / {g['n_questions']}",
            " / ".join(str(g[k]) for k in ("n_no_evidence", "n_outside", "n_no_room")),
            fmt(g["gain_nats"], "+.3f"), fmt(g["gain_bits_per_byte"], "+.4f") + se,
            f"{g['positive']} of {g['n_counted']}", fmt(g["ppl"], ".3f"), fmt(g["longppl"], ".3f"),
            fmt(g["longppl_soft"], ".3f"), str(g["n_key_tokens"]), str(g["n_truncated"]),
        ])  # fmt: skip
    return md_table(header, rows)


def types_table(family: list[dict[str, Any]]) -> str:
    """Per question type (columns) and member (rows): the mean answer gain in bits per byte (counted)."""
    types = list(
        dict.fromkeys(t["type"] for r in family for t in r["loogle"]["by_type"] if t["type"] != "all")
    )
    header = ["member", *(f"{t} (bits/byte, n)" for t in types)]
    rows = []
    for r in family:
        cells = {t["type"]: t for t in r["loogle"]["by_type"]}
        rows.append([r["label"]] + [type_cell(cells[t]) if t in cells else "" for t in types])
    return md_table(header, rows)


def correlation_table(rows: list[dict[str, Any]]) -> str:
    header = ["metric (on LooGLE's documents)", "Pearson r", "p", "Spearman rho", "p", "members"]
    return md_table(
        header,
        [
            [r["label"], fmt(r["pearson_r"], "+.3f"), fmt(r["pearson_p"], ".2g"),
             fmt(r["spearman_r"], "+.3f"), fmt(r["spearman_p"], ".2g"), str(r["n"])]
            for r in rows
        ],
    )  # fmt: skip


def type_cell(row: dict[str, Any]) -> str:
    return f"{fmt(row['gain_bits_per_byte'], '+.4f')} ({row['n_counted']} of {row['n_questions']})"
