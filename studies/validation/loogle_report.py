"""The tables and numbers of the validation report's LooGLE section (``report.md.j2`` reads them)."""

from __future__ import annotations

from typing import Any

from pipeline.formats import fmt
from pipeline.reporting.common import md_table, md_text

VERDICT = {"better": "**beats** PPL", "worse": "**does not beat** PPL", "undetermined": "is **undetermined**"}


def context(results: dict[str, Any]) -> dict[str, Any] | None:
    """What the template reads of the LooGLE target (None: the run had none)."""
    loogle = results.get("loogle")
    if loogle is None:
        return None
    family, stats = results["family"], loogle["correlations"]
    members = stats["members"]
    return {
        **loogle,
        "stats": stats,
        "counting": [m["label"] for m in members if m["counts"]],
        "not_counting": [f"{m['label']} ({m['n_counted']})" for m in members if not m["counts"]],
        "groups": [g for g in groups(stats) if g["result"]["labels"]],
        "empty_groups": [g["name"] for g in groups(stats) if not g["result"]["labels"]],
        "tables": {
            "members": members_table(family, stats["min_questions"]),
            "types": types_table(family),
            "groups": groups_table(stats),
        },
    }


def groups(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """Each group of members over their own questions, then over their common ones where there are
    enough: a name, its result (``loogle_stats.group``) and its verdict on LongPPL vs PPL."""
    named = [("the members but the evaluator's", stats["across"])]
    named += [("the evaluator's members", stats["evaluator"])]
    named += [(f"{model}'s members", part) for model, part in sorted(stats["within"].items())]  # as read back
    out = []
    for name, part in named:
        for scope in ("own", "common"):
            result = part[scope]
            if result is None:
                continue
            label = f"{name}, {'each its own' if scope == 'own' else 'their common'} questions"
            out.append({"name": label, "result": result, "verdict": VERDICT[result["verdict"]]})
    return out


def members_table(family: list[dict[str, Any]], minimum: int) -> str:
    """Per member: its questions counted and excluded, whether it counts, the mean answer gain, and its
    scores on LooGLE."""
    header = ["member", "context (tokens)", "counted / questions", f"counts (>= {minimum})",
              "excluded: no evidence located / not all located / evidence outside / no room",
              "answer gain, nats", "answer gain, bits/byte (± s.e.)", "gain > 0", "PPL", "LongPPL",
              "LongPPL-soft", "key tokens", "documents truncated"]  # fmt: skip
    rows = []
    for r in family:
        g = r["loogle"]
        se = (
            f" (± {fmt(g['gain_bits_per_byte_se'], '.3f')})" if g["gain_bits_per_byte_se"] is not None else ""
        )
        excluded = ("n_no_evidence", "n_not_all_located", "n_outside", "n_no_room")
        rows.append([
            md_text(r["label"]) + (" (evaluator)" if g["self_evaluation"] else ""), str(g["limit"]),
            f"{g['n_counted']} / {g['n_questions']}", "yes" if g["n_counted"] >= minimum else "no",
            " / ".join(str(g.get(k, 0)) for k in excluded),
            fmt(g["gain_nats"], "+.3f"), fmt(g["gain_bits_per_byte"], "+.4f") + se,
            f"{g['positive']} of {g['n_counted']}", fmt(g["ppl"], ".3f"), fmt(g["longppl"], ".3f"),
            fmt(g["longppl_soft"], ".3f"), str(g["n_key_tokens"]), str(g["n_truncated"]),
        ])  # fmt: skip
    return md_table(header, rows)


def types_table(family: list[dict[str, Any]]) -> str:
    """Per question type (columns) and member (rows): the mean answer gain in bits per byte (counted);
    types and labels (the data's and the user's) escaped as Markdown shows them literally."""
    types = list(
        dict.fromkeys(t["type"] for r in family for t in r["loogle"]["by_type"] if t["type"] != "all")
    )
    header = ["member", *(f"{md_text(t)} (bits/byte, n)" for t in types)]
    rows = []
    for r in family:
        cells = {t["type"]: t for t in r["loogle"]["by_type"]}
        rows.append([md_text(r["label"])] + [type_cell(cells[t]) if t in cells else "" for t in types])
    return md_table(header, rows)


def groups_table(stats: dict[str, Any]) -> str:
    """Each group (members that count), each metric: Spearman rho, scipy's p (members taken as
    independent) and the paired bootstrap's p and 95% interval."""
    header = ["group (members that count)", "members", "questions", "metric", "Spearman rho",
              "p (scipy)", "p (bootstrap)", "95% interval (bootstrap)", "Pearson r"]  # fmt: skip
    rows = []
    for g in groups(stats):
        result = g["result"]
        for r in result["rows"]:
            rows.append([g["name"], ", ".join(result["labels"]), str(result["questions"]), r["label"],
                         fmt(r["spearman_r"], "+.3f"), fmt(r["spearman_p"], ".2g"),
                         fmt(r["bootstrap_p"], ".2g"), span(r["bootstrap_interval"]),
                         fmt(r["pearson_r"], "+.3f")])  # fmt: skip
    return md_table(header, rows) if rows else "(no group has a member that counts)"


def span(interval: list[float] | None) -> str:
    return "n/a" if interval is None else f"[{fmt(interval[0], '+.2f')}, {fmt(interval[1], '+.2f')}]"


def type_cell(row: dict[str, Any]) -> str:
    return f"{fmt(row['gain_bits_per_byte'], '+.4f')} ({row['n_counted']} of {row['n_questions']})"
