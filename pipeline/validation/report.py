"""``docs/validation.md`` from `make validate`'s results: this module builds the numbers and tables,
the prose lives in the template ``report.md.j2`` beside it."""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path
from typing import Any

import jinja2

from pipeline.provenance import machine
from pipeline.reporting.common import fmt, md_table, pct
from pipeline.results import METRICS

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
    report: Path = Path("docs/validation.md"),
) -> str:
    """The whole page, from the results, the (alpha, beta) grid and this run's timings; links are
    relative to ``report``."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # Markdown, not HTML
    )
    env.filters.update(pct=pct, fmt=fmt, g=lambda v: format(v, "g"))
    steps = ", ".join(f"{k} {v:.0f} s" for k, v in timing.items() if k != "total")
    pictures = Path(os.path.relpath(docs_dir, report.parent)).as_posix()
    context = {
        "timing": timing,
        "steps": steps,
        "machine": machine(),
        "same": same_as_previous,
        "pictures": pictures,
        "view_page": view_page,
        "windows": ", ".join(r["label"].removeprefix("W=") for r in results["family"]),
        **reading(results, grid),
    }
    return env.get_template(TEMPLATE).render(context)


def tables(results: dict[str, Any]) -> dict[str, str]:
    ident, ev = results["identification"], results["evaluator_retrieval"]
    return {
        "identification_responses": identification_table(ident, "responses"),
        "identification_qa": identification_table(ident, "qa"),
        "retrieval": retrieval_table({"full": ev["full"], "short (the keytokens stage's K, d)": ev["short"]}),
        "family": family_table(results["family"]),
        "correlations": correlation_table(results["correlations"]),
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


FAMILY_VALUES = ("answer_ppl", "other_ppl", "ppl", "longppl", "longppl_soft")


def family_table(family: list[dict[str, Any]]) -> str:
    header = ["context", "answer-token acc.", "exact match", "answer PPL", "other QA PPL", *METRICS.values()]
    rows = [
        [r["label"], pct(r["token_accuracy"]), pct(r["answer_exact_match"])]
        + [fmt(r[k], ".3f") for k in FAMILY_VALUES]
        for r in family
    ]
    first, last = family[0], family[-1]
    change = ["change, first to last", "", "", *(change_text(first[k], last[k]) for k in FAMILY_VALUES)]
    return md_table(header, [*rows, change])


def change_text(a: float | None, b: float | None) -> str:
    """The relative change from a to b, as a signed percentage."""
    return "n/a" if not a or b is None else f"{100 * (b - a) / a:+.1f}%"


def correlation_table(stats: list[dict[str, Any]]) -> str:
    header = ["metric", "Pearson r", "p", "Spearman rho", "p", "paper, Pearson r with LongEval (Table 1)"]
    return md_table(
        header,
        [
            [r["label"], fmt(r["pearson_r"], "+.3f"), fmt(r["pearson_p"], ".2g"),
             fmt(r["spearman_r"], "+.3f"), fmt(r["spearman_p"], ".2g"),
             fmt(PAPER_TABLE1.get(r["metric"]), "+.2f")]
            for r in stats
        ],
    )  # fmt: skip


def reading(results: dict[str, Any], grid: list[tuple[float, float]]) -> dict[str, Any]:
    """The numbers the report's prose reads, by name (every figure in it is the measured one)."""
    s, syn, family = results["settings"], results["synthetic"], results["family"]
    short = syn.get("answer_tokens_short_logprob", {}).get("median")
    by_metric = {r["metric"]: r for r in results["correlations"]}
    pearson = {m: by_metric[m]["pearson_r"] for m in METRICS}
    return {
        "s": s,
        "syn": syn,
        "govreport": results["govreport"],
        "family": family,
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
        "first": family[0],
        "last": family[-1],
        "change": {m: change_text(family[0][m], family[-1][m]) for m in METRICS},
        "pearson": pearson,
        "order": None if None in pearson.values() else [METRICS[m] for m in sorted(pearson, key=pearson.get)],
        "same_spearman": _same_spearman(results["correlations"]),
        "dips": [
            b["label"] for a, b in itertools.pairwise(family) if b["token_accuracy"] < a["token_accuracy"]
        ],
    }


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


def _same_spearman(stats: list[dict[str, Any]]) -> str | None:
    """The one Spearman rho all metrics share (every metric ranks the variants by W), if they do."""
    rhos = {fmt(r["spearman_r"], "+.3f") for r in stats}
    return rhos.pop() if len(rhos) == 1 else None
