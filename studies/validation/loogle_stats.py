"""The LooGLE target's statistics (``loogle_target.correlations``): which members count, the metrics
against the mean answer gain within each model across its limits and across the members that are not
the evaluator (the evaluator's own members apart), and p-values that account for the questions the
members share.

- A member counts only with at least ``min_questions`` counted questions; the others are listed.
- Groups: ``across`` (the counting members whose model is not the LooGLE artifact's evaluator), the
  ``evaluator``'s counting members apart (its key tokens are its own: self-evaluation), and ``within``
  each model (its counting members, one per context limit).
- Each group twice: each member's mean over its own counted questions, and over the questions every
  member of the group counts (``common``, when there are at least ``min_questions``).
- p-values: scipy's (members taken as independent, which they are not) and a paired cluster bootstrap
  over documents: the documents resampled with replacement, each drawn document bringing all of its
  questions (a document's questions share its text, so they are not independent of each other), the
  same resample for every member, each member's mean over its counted questions in it, the metrics
  taken as fixed; p (two-sided) is twice the share of replicates on the far side of 0 (at most 1),
  with the 95% interval of Spearman's rho, and the same for the difference of LongPPL's rho and PPL's.
  It does not cover what varies with the members (their PPL, LongPPL and LongPPL-soft are taken as
  exact), nor documents beyond the data's: with few documents (LooGLE's test data has 5) few distinct
  resamples exist, and the interval is coarse.
- A verdict is ``undetermined`` unless the group has at least 3 members and the bootstrap interval
  excludes 0.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pipeline.formats import fmt
from pipeline.results.correlations import correlate

METRICS = {"ppl": "PPL", "longppl": "LongPPL", "longppl_soft": "LongPPL-soft"}
LEVEL = 0.05


def counted(row: dict[str, Any]) -> dict[str, float]:
    """A member's counted questions: source id -> answer gain in bits per byte."""
    return {
        q["source_id"]: q["gain_bits_per_byte"] for q in row["loogle"]["questions"] if q["excluded"] is None
    }


def common_questions(members: list[dict[str, Any]]) -> list[str]:
    """The questions (source ids, in order) that every member counts."""
    sets = [counted(r) for r in members]
    return [q for q in sets[0] if all(q in s for s in sets[1:])] if sets else []


def spearman(xs: np.ndarray, ys: np.ndarray) -> float:
    """Spearman's rho (average ranks for ties); NaN when either side is constant."""
    from scipy import stats

    if len(set(xs.tolist())) < 2 or len(set(ys.tolist())) < 2:
        return math.nan
    return float(stats.spearmanr(xs, ys).statistic)


def documents_of(members: list[dict[str, Any]]) -> dict[str, str]:
    """Each question's document (source id -> doc id), from the members' question records."""
    return {q["source_id"]: q["doc_id"] for r in members for q in r["loogle"]["questions"]}


def bootstrap(
    members: list[dict[str, Any]], questions: list[str], resamples: int, seed: int
) -> dict[str, np.ndarray]:
    """Per metric, Spearman's rho of the metric against each member's mean gain over the ``questions``
    it counts of each resample of their documents (a cluster bootstrap: a document drawn k times
    weighs each of its questions k times; a replicate where a member has none of its questions is
    NaN)."""
    gains = np.array([[counted(r).get(q, math.nan) for q in questions] for r in members])
    document = documents_of(members)
    names = list(dict.fromkeys(document[q] for q in questions))
    of_question = np.array([names.index(document[q]) for q in questions])
    rng = np.random.default_rng(seed)
    counts_of = ~np.isnan(gains)
    values = np.where(counts_of, gains, 0.0)
    xs = {metric: np.array([r["loogle"][metric] for r in members]) for metric in METRICS}
    out: dict[str, list[float]] = {m: [] for m in METRICS}
    for _ in range(resamples):
        weights = np.bincount(rng.integers(0, len(names), len(names)), minlength=len(names))[of_question]
        total = (counts_of * weights).sum(axis=1)
        means = (values * weights).sum(axis=1) / total if (total > 0).all() else None
        for metric in METRICS:
            out[metric].append(math.nan if means is None else spearman(xs[metric], means))
    return {m: np.array(v) for m, v in out.items()}


def tail_p(values: np.ndarray) -> float | None:
    """Two-sided: twice the smaller share of replicates on either side of 0 (at most 1)."""
    values = values[~np.isnan(values)]
    if not len(values):
        return None
    below, above = float(np.mean(values <= 0)), float(np.mean(values >= 0))
    return min(1.0, 2 * min(below, above))


def interval(values: np.ndarray) -> list[float] | None:
    values = values[~np.isnan(values)]
    return (
        None
        if not len(values)
        else [float(np.quantile(values, LEVEL / 2)), float(np.quantile(values, 1 - LEVEL / 2))]
    )


def group(
    members: list[dict[str, Any]], questions: list[str] | None, resamples: int, seed: int
) -> dict[str, Any]:
    """One group of members: each metric against the mean gain (over ``questions``, or each member's
    own when None), with scipy's and the bootstrap's p-values, and the verdict on LongPPL vs PPL."""
    pool = questions or list(dict.fromkeys(q for r in members for q in counted(r)))
    mine = [{q: g for q, g in counted(r).items() if q in pool} for r in members]
    means = [float(np.mean(list(m.values()))) if m else math.nan for m in mine]
    replicates = bootstrap(members, pool, resamples, seed) if len(members) >= 3 else {}
    rows = []
    for metric, label in METRICS.items():
        stats, note = correlate([r["loogle"][metric] for r in members], means)
        boot = replicates.get(metric)
        rows.append({"metric": metric, "label": label, "n": len(members), **stats, "note": note,
                     "bootstrap_p": None if boot is None else tail_p(boot),
                     "bootstrap_interval": None if boot is None else interval(boot)})  # fmt: skip
    difference = replicates["longppl"] - replicates["ppl"] if replicates else None
    by = {r["metric"]: r for r in rows}
    documents = len({documents_of(members)[q] for q in pool})
    return {
        "labels": [r["label"] for r in members], "questions": len(pool), "documents": documents,
        "common": questions is not None,
        "mean_gains": means, "rows": rows,
        "longppl_minus_ppl": None if difference is None else {
            "observed": None if by["longppl"]["spearman_r"] is None or by["ppl"]["spearman_r"] is None
            else by["longppl"]["spearman_r"] - by["ppl"]["spearman_r"],
            "bootstrap_p": tail_p(difference), "bootstrap_interval": interval(difference)},
        "verdict": verdict(len(members), None if difference is None else interval(difference)),
    }  # fmt: skip


def verdict(n: int, difference: list[float] | None) -> str:
    """LongPPL against PPL by rank (lower Spearman rho: a larger gain with a lower perplexity):
    ``better`` or ``worse`` only when the bootstrap interval of the difference excludes 0."""
    if n < 3 or difference is None:
        return "undetermined"
    low, high = difference
    return "better" if high < 0 else "worse" if low > 0 else "undetermined"


def both_ways(members: list[dict[str, Any]], minimum: int, resamples: int, seed: int) -> dict[str, Any]:
    """A group over each member's own questions, and over the questions all of them count."""
    common = common_questions(members)
    return {
        "own": group(members, None, resamples, seed),
        "common": group(members, common, resamples, seed) if len(common) >= minimum else None,
        "n_common": len(common),
    }


def statistics(rows: list[dict[str, Any]], minimum: int, resamples: int, seed: int) -> dict[str, Any]:
    """Every group of the members with at least ``minimum`` counted questions (module doc)."""
    usable = [r for r in rows if r["loogle"]["n_counted"] >= minimum]
    others = [r for r in usable if not r["loogle"]["self_evaluation"]]
    evaluator = [r for r in usable if r["loogle"]["self_evaluation"]]
    models = list(dict.fromkeys(r["model"] for r in usable))
    within = {m: both_ways([r for r in usable if r["model"] == m], minimum, resamples, seed) for m in models}
    return {
        "min_questions": minimum,
        "bootstrap": {"resamples": resamples, "seed": seed, "level": LEVEL, "resampled": "documents"},
        "members": [{"label": r["label"], "model": r["model"], "n_counted": r["loogle"]["n_counted"],
                     "self_evaluation": r["loogle"]["self_evaluation"], "counts": r in usable} for r in rows],
        "across": both_ways(others, minimum, resamples, seed),
        "evaluator": both_ways(evaluator, minimum, resamples, seed),
        "within": within,
    }  # fmt: skip


def recorded_rows(results: dict[str, Any]) -> tuple[list[dict[str, Any]], int, int, int]:
    """The members, ``min_questions``, resamples and seed a results file recorded: `make validate`'s
    ``results.json`` (its ``family``, each member's questions inside it) or a file of the LooGLE part
    alone (``members`` with the ``questions`` of each beside them, as the SmolLM2 limits' raw JSON)."""
    if "family" in results:
        recorded = results["loogle"]["correlations"]
        rows = [r for r in results["family"] if r.get("loogle")]
        boot = recorded["bootstrap"]
        return rows, recorded["min_questions"], boot["resamples"], boot["seed"]
    questions = results["questions"]
    rows = [{**m, "loogle": {**m["loogle"], "questions": questions[m["label"]]}} for m in results["members"]]
    return rows, results["min_questions"], results["resamples"], results["seed"]


def group_lines(name: str, result: dict[str, Any] | None) -> list[str]:
    """A group's members, its questions and documents, each metric's rho with the bootstrap's p and
    95% interval, and its verdict, as ``main`` prints them."""
    if result is None:
        return []
    size = f"{result['questions']} questions of {result['documents']} documents"
    lines = [f"{name}: {', '.join(result['labels']) or 'no member'} ({size})"]
    for r in result["rows"]:
        low, high = r["bootstrap_interval"] or (None, None)
        span = f"[{fmt(low, '+.2f')}, {fmt(high, '+.2f')}]"
        p = fmt(r["bootstrap_p"], ".2g")
        lines.append(
            f"  {r['label']:<13} rho {fmt(r['spearman_r'], '+.3f')}, bootstrap p {p}, 95% interval {span}"
        )
    return [*lines, f"  LongPPL against PPL: {result['verdict']}"]


def main() -> None:
    """The statistics of a results file recomputed with this module's bootstrap (over documents),
    printed, and written as JSON with ``--json``: ``python -m studies.validation.loogle_stats --results
    docs/reports/validation/results.json``."""
    import argparse
    import json
    from pathlib import Path

    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, required=True, help="results.json, or a LooGLE part's JSON")
    parser.add_argument("--json", type=Path, help="write the statistics here")
    args = parser.parse_args()
    stats = statistics(*recorded_rows(json.loads(args.results.read_text(encoding="utf-8"))))
    groups = [("across", stats["across"]), ("evaluator", stats["evaluator"])]
    groups += [(f"within {model}", both) for model, both in stats["within"].items()]
    for name, both in groups:
        print(
            "\n".join(
                group_lines(f"{name}, own", both["own"]) + group_lines(f"{name}, common", both["common"])
            )
        )
    if args.json:
        args.json.write_text(json.dumps(stats, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
