"""`make loogle-evidence`'s table: per task, the evidence strings, each rule's count and the fraction
located; then the unlocated strings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.formats import terminal_text


def table_lines(reports: list[dict[str, Any]]) -> list[str]:
    """A table: per task, the evidence strings, each rule's count and the fraction located; then the
    unlocated strings, each with why where a cap stopped its alignment. The rules are the reports' own
    (``by_rule``, unlocated last). Text from the data (task, question id, evidence) is shown with its
    control characters escaped (``terminal_text``): it cannot drive the terminal."""
    rules = tuple(r for r in (reports[0]["by_rule"] if reports else {}) if r != "unlocated")
    header = f"{'task':<22}{'evidence':>9}" + "".join(f"{r:>11}" for r in (*rules, "unlocated"))
    lines = [header + f"{'located':>9}"]
    for rep in reports:
        counts = "".join(f"{rep['by_rule'][r]:>11}" for r in (*rules, "unlocated"))
        share = "-" if rep["fraction_located"] is None else f"{rep['fraction_located']:.1%}"
        lines.append(f"{terminal_text(rep['task']):<22}{rep['n_evidence']:>9}{counts}{share:>9}")
    for rep in reports:
        for miss in rep["unlocated"]:
            head = terminal_text(miss["head"].replace("\n", " "))
            where = f"{terminal_text(rep['task'])}  {terminal_text(miss['qid'])} [{miss['evidence_index']}]"
            note = f"  ({miss['note']})" if miss.get("note") else ""
            lines.append(f"unlocated  {where}  {head}{note}")
    return lines


def summary(result: dict[str, Any], out: Path) -> str:
    """What `make loogle-evidence` prints: the table and where the JSON went."""
    return "\n".join([*table_lines(result["tasks"]), f"written       {terminal_text(out)}"])
