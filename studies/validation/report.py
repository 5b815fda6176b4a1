"""``docs/reports/validation.md`` from `make validate`'s results: this module builds the numbers and
tables, the prose lives in the template ``report.md.j2`` beside it."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from pipeline.formats import fmt
from pipeline.provenance import machine, run_stamp
from pipeline.reporting.common import markdown_templates, md_table, pct
from studies.validation import loogle_report
from studies.validation.study import FAMILY_METRICS

PAPER_ACCURACY = {"LSD": 0.856, "LSD and LCL": 0.982}  # paper Fig. 4b (Mixtral-8x7B evaluator on LongEval)
PAPER_TABLE1 = {"ppl": 0.31, "longppl_soft": -0.21, "longppl": -0.86}  # paper Table 1: Pearson r, LongEval
TEMPLATE = "report.md.j2"


def render(
    results: dict[str, Any],
    timing: dict[str, float],
    docs_dir: Path,
    view_page: str,
    grid: list[tuple[float, float]],
    same_as_previous: bool | None = None,
    report: Path = Path("docs/reports/validation.md"),
) -> str:
    """The whole page, from the results, the (alpha, beta) grid and this run's timings; links are
    relative to ``report``."""
    env = markdown_templates(Path(__file__).parent)
    steps = ", ".join(
        f"{k} {v:.0f} s"
        for k, v in timing.items()
        if k not in ("total", "LooGLE only") and not k.startswith("member ")
    )
    pictures = Path(os.path.relpath(docs_dir, report.parent)).as_posix()
    context = {
        "timing": timing,
        "steps": steps,
        "machine": machine(),
        "stamp": run_stamp(),
        "same": same_as_previous,
        "pictures": pictures,
        "view_page": view_page,
        "members_time": ", ".join(
            f"{k.removeprefix('member ')} {v:.0f} s ({member_parts(timing, k)})"
            for k, v in timing.items()
            if k.startswith("member ") and not k.endswith((" GovReport", " LooGLE"))
        ),
        "loogle": loogle_report.context(results),
        **reading(results, grid),
    }
    return env.get_template(TEMPLATE).render(context)


def member_parts(timing: dict[str, float], key: str) -> str:
    """A member's seconds on GovReport, and on LooGLE where it ran."""
    parts = [
        f"{name} {timing[f'{key} {name}']:.0f} s"
        for name in ("GovReport", "LooGLE")
        if f"{key} {name}" in timing
    ]
    return ", ".join(parts)


def tables(results: dict[str, Any]) -> dict[str, Any]:
    ident, ev = results["identification"], results["evaluator_retrieval"]
    family = results["family"]
    return {
        "identification_responses": identification_table(ident, "responses"),
        "identification_qa": identification_table(ident, "qa"),
        "retrieval": retrieval_table({"full": ev["full"], "short (the keytokens stage's K, d)": ev["short"]}),
        "members": members_table(family),
        "evaluators": {e["label"]: evaluator_table(family, e["label"]) for e in results["evaluators"]},
        "correlations": {label: correlation_table(rows) for label, rows in results["correlations"].items()},
        "closing": closing_table(results),
    }


def identification_table(rows: list[dict[str, Any]], scope: str) -> str:
    header = ["rule", "accuracy", "precision", "recall", "balanced accuracy", "TP", "FP", "FN", "TN"]
    body = [
        [r["threshold"], *(pct(r[k]) for k in ("accuracy", "precision", "recall", "balanced_accuracy"))]
        + [str(r[k]) for k in ("tp", "fp", "fn", "tn")]
        for r in rows
        if r["scope"] == scope
    ]
    return md_table(header, body)


def retrieval_table(rows: dict[str, dict[str, Any]]) -> str:
    header = [
        "context",
        "answer-token accuracy",
        "exact match (whole answer)",
        "answer-token PPL",
        "other QA PPL",
    ]
    body = [
        [label, pct(r["token_accuracy"]), pct(r["answer_exact_match"])]
        + [fmt(r[k], ".3f") for k in ("answer_ppl", "other_ppl")]
        for label, r in rows.items()
    ]
    return md_table(header, body)


def members_table(family: list[dict[str, Any]]) -> str:
    """The evaluator-independent values: retrieval on the synthetic documents, PPL and bits per byte."""
    header = ["member", "model", "context", "answer-token acc.", "exact match", "answer PPL",
              "PPL", "bits/byte", "tokens", "bytes"]  # fmt: skip
    rows = [
        [r["label"] + (" (checkpoint)" if r["checkpoint"] else ""), f"`{r['model']}`",
         "full" if r["context_limit"] is None else str(r["context_limit"]),
         pct(r["token_accuracy"]), pct(r["answer_exact_match"]), fmt(r["answer_ppl"], ".3f"),
         fmt(r["ppl"], ".3f"), fmt(r["bpb"], ".4f"), str(r["n_tokens"]), str(r["n_bytes"])]
        for r in family
    ]  # fmt: skip
    return md_table(header, rows)


def evaluator_table(family: list[dict[str, Any]], evaluator: str) -> str:
    """The values that depend on the evaluator's key tokens, self-evaluation rows marked."""
    header = ["member", "self-evaluation", "LongPPL", "LongPPL-soft", "key bits/byte", "key tokens",
              "key-char coverage"]  # fmt: skip
    rows = []
    for r in family:
        v = r["evaluators"][evaluator]
        rows.append([r["label"], "**self**" if v["self_evaluation"] else "",
                     fmt(v["longppl"], ".3f"), fmt(v["longppl_soft"], ".3f"), fmt(v["key_bpb"], ".4f"),
                     str(v["n_key_tokens"]), pct(v["key_char_coverage"])])  # fmt: skip
    return md_table(header, rows)


def correlation_table(stats: list[dict[str, Any]]) -> str:
    header = ["metric", "Pearson r", "p", "Spearman rho", "p", "members",
              "paper, Pearson r with LongEval (Table 1)"]  # fmt: skip
    return md_table(
        header,
        [
            [r["label"] + ("" if r["evaluator_dependent"] else " (no evaluator)"),
             fmt(r["pearson_r"], "+.3f"), fmt(r["pearson_p"], ".2g"),
             fmt(r["spearman_r"], "+.3f"), fmt(r["spearman_p"], ".2g"), str(r["n"]),
             fmt(PAPER_TABLE1.get(r["metric"]), "+.2f")]
            for r in stats
        ],
    )  # fmt: skip


def closing_table(results: dict[str, Any]) -> str:
    """Each metric's Spearman rho (p) and Pearson r with the accuracy, for every evaluator side by side."""
    labels = [e["label"] for e in results["evaluators"]]
    header = ["metric"] + [f"{h}, evaluator {e}" for e in labels for h in ("Spearman rho (p)", "Pearson r")]
    by = {e: {r["metric"]: r for r in results["correlations"][e]} for e in labels}
    rows = [
        [label] + [cell for e in labels for cell in (
            f"{fmt(by[e][m]['spearman_r'], '+.3f')} ({fmt(by[e][m]['spearman_p'], '.2g')})",
            fmt(by[e][m]["pearson_r"], "+.3f"))]
        for m, (label, _) in FAMILY_METRICS.items()
    ]  # fmt: skip
    return md_table(header, rows)


def reading(results: dict[str, Any], grid: list[tuple[float, float]]) -> dict[str, Any]:
    """The numbers the report's prose reads, by name (every figure in it is the measured one)."""
    s, syn, family = results["settings"], results["synthetic"], results["family"]
    short = syn.get("answer_tokens_short_logprob", {}).get("median")
    return {
        "s": s,
        "syn": syn,
        "govreport": results["govreport"],
        "evaluators": results["evaluators"],
        "family": family,
        "models": list(dict.fromkeys(r["model"] for r in family)),
        "checkpoints": [r["label"] for r in family if r["checkpoint"]],
        "ev": results["evaluator_retrieval"],
        "tables": tables(results),
        "negative_share": negative_share(results["identification"], "responses"),
        "rules": named_rules(results["identification"], s["alpha"], s["beta"], grid),
        "paper": {
            "accuracy_both": PAPER_ACCURACY["LSD and LCL"],
            "accuracy_lsd": PAPER_ACCURACY["LSD"],
            "table1": PAPER_TABLE1,
        },
        "short_median": short,
        "threshold": None if short is None else math.exp(short + s["alpha"]),
        "verdicts": verdicts(results),
        "longppl_better": [
            e["label"]
            for e in results["evaluators"]
            if results["ranking"][e["label"]]["longppl_vs_ppl"] == "better"
        ],
        "metrics": {m: label for m, (label, _) in FAMILY_METRICS.items()},
        "by_model": by_model(family),
    }


def verdicts(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per evaluator: the best-ranking metrics and each metric's Spearman and Pearson values."""
    out = []
    for e in results["evaluators"]:
        stats = {r["metric"]: r for r in results["correlations"][e["label"]]}
        ranking = results["ranking"][e["label"]]
        out.append({
            **e,
            **ranking,
            "best_labels": [FAMILY_METRICS[m][0] for m in ranking["best"]],
            "spearman": {m: r["spearman_r"] for m, r in stats.items()},
            "spearman_p": {m: r["spearman_p"] for m, r in stats.items()},
            "pearson": {m: r["pearson_r"] for m, r in stats.items()},
            "self_members": [r["label"] for r in results["family"]
                             if r["evaluators"][e["label"]]["self_evaluation"]],
        })  # fmt: skip
    return out


def by_model(family: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per model, its full-context member (the last one when none is): for comparing models."""
    out = {}
    for r in family:
        if r["model"] not in out or r["context_limit"] is None:
            out[r["model"]] = r
    return list(out.values())


def named_rules(
    ident: list[dict[str, Any]], alpha: float, beta: float, grid: list[tuple[float, float]]
) -> dict[str, Any]:
    """The identification rows the prose names: the default thresholds' rules on the answer lines and
    over all question-and-answer tokens, and LSD alone at the grid's smallest alpha below the default."""

    def rule(scope: str, threshold: str) -> dict[str, Any]:
        return next(r for r in ident if r["scope"] == scope and r["threshold"] == threshold)

    lower = sorted(a for a, _ in grid if a < alpha)
    return {
        "both": rule("responses", f"LSD > {alpha:g} and LCL > {beta:g}"),
        "lsd": rule("responses", f"LSD > {alpha:g}"),
        "lcl": rule("responses", f"LCL > {beta:g}"),
        "qa_both": rule("qa", f"LSD > {alpha:g} and LCL > {beta:g}"),
        "qa_lsd": rule("qa", f"LSD > {alpha:g}"),
        "lower_alpha": rule("responses", f"LSD > {lower[0]:g}") if lower else None,
    }


def negative_share(ident: list[dict[str, Any]], scope: str) -> float:
    """The accuracy of calling every token non-answer: the share of non-answer tokens."""
    row = next(r for r in ident if r["scope"] == scope)
    return (row["fp"] + row["tn"]) / max(1, row["tp"] + row["fp"] + row["fn"] + row["tn"])
