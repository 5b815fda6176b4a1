"""Timeline reorder: the long-dependency questions whose answer is an order of labelled events ("II,I,III"
or "2,1,3"), scored by how far the predicted order is from the answer's. A question is one by the data's
``type`` where it has one (LooGLE's "timeline_reorder", its ``Output/`` files' "时间线"); without a type,
by an answer whose labels form a permutation (each of 1..n, or of I..n, once; n at least 2), so a
computed "20,300" is never taken for an order of two events.

The repository's ``Reorder/reorder_eval.py`` cannot compute these on its released answers: it indexes a
list of label strings as positions (every value becomes "None") and replaces a computed value by the
maximum. Here the deviations are those its ``get_reorder_deviation.py`` defines, on positions: with
``p[j]`` the predicted position of the answer's j-th event, location square deviation mean((p[j]-j)^2),
location mean deviation mean(|p[j]-j|), swap deviation (the fewest swaps: n minus the cycles of p) and
swap distance deviation (its greedy sum of swap distances). The predicted order is the answer's labels in
their order of first appearance in the prediction; a prediction that does not order every event exactly
once scores the largest deviation any wrong order of n events has (its ``get_max_deviation.py``).
"""

from __future__ import annotations

import itertools
import re
from functools import cache
from typing import Any

import numpy as np

from pipeline.errors import PipelineError

ORDER = re.compile(r"^\s*([IVXLCDM]+|\d+)(\s*,\s*([IVXLCDM]+|\d+))+\s*$")
NAMES = ("location_square", "location_mean", "swap", "swap_distance")
TIMELINE_TYPES = ("timeline reorder", "timeline", "时间线")  # normalized: casefolded, "_" as a space


def roman(n: int) -> str:
    """n (1 to 3999) in Roman numerals."""
    values = ((1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"), (50, "L"))
    values += ((40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"))
    out = ""
    for value, numeral in values:
        count, n = divmod(n, value)
        out += numeral * count
    return out


def is_permutation(answer: Any) -> bool:
    """The answer is an order of n >= 2 labels, each of 1..n (or of I..n) exactly once."""
    if not isinstance(answer, str) or ORDER.match(answer) is None:
        return False
    labels = [label.strip() for label in answer.split(",")]
    n = len(labels)
    return set(labels) in ({str(i) for i in range(1, n + 1)}, {roman(i) for i in range(1, n + 1)})


def is_timeline_type(kind: str) -> bool:
    return kind.strip().casefold().replace("_", " ").replace("-", " ") in TIMELINE_TYPES


def is_reorder(answer: Any, kind: str | None = None) -> bool:
    """A timeline question: by its type where the data gives one, else by an answer that is a
    permutation of labels. A question typed a timeline whose answer is no such order is an error."""
    if kind is None:
        return is_permutation(answer)
    if not is_timeline_type(kind):
        return False
    if not is_permutation(answer):
        raise PipelineError(
            f"a question of type {kind!r} has the answer {str(answer)[:60]!r}: a timeline answer is an "
            "order of n labels, each of 1..n (or I..n) once, such as 2,1,3 or II,I,III"
        )
    return True


def check_timeline(task: str, questions: list[Any]) -> None:
    """Every long-dependency question typed a timeline has an order for its answer (``.answer``,
    ``.kind``): checked when the questions load, before any model does."""
    for question in questions if task == "longdep_qa" else ():
        is_reorder(question.answer, question.kind)


def predicted_order(labels: list[str], prediction: str) -> list[str]:
    """The answer's labels in their order of first appearance in the prediction (as whole words)."""
    found = re.findall(r"\b(?:[IVXLCDM]+|\d+)\b", prediction)
    return list(dict.fromkeys(label for label in found if label in labels))


def swap_distance(p: list[int]) -> int:
    """The repository's greedy swap distance: swap the pair that most lowers the mean deviation per unit
    of distance until every event is in place; the sum of the swaps' distances."""
    p, weight, n = list(p), 0, len(p)
    while any(v != i for i, v in enumerate(p)):
        best, pair = 0.0, (0, 0)
        for i in range(n):
            for j in range(i + 1, n):
                gain = ((abs(p[i] - i) + abs(p[j] - j)) - (abs(p[j] - i) + abs(p[i] - j))) / (j - i)
                if gain > best:
                    best, pair = gain, (i, j)
        if best <= 0:
            raise AssertionError(f"no swap improves {p}")  # cannot happen for a permutation
        i, j = pair
        p[i], p[j] = p[j], p[i]
        weight += j - i
    return weight


def cycles(p: list[int]) -> int:
    seen, count = set(), 0
    for start in range(len(p)):
        if start not in seen:
            count += 1
            while start not in seen:
                seen.add(start)
                start = p[start]
    return count


def deviations(p: list[int]) -> dict[str, float]:
    n = len(p)
    return {
        "location_square": sum((v - i) ** 2 for i, v in enumerate(p)) / n,
        "location_mean": sum(abs(v - i) for i, v in enumerate(p)) / n,
        "swap": float(n - cycles(p)),
        "swap_distance": float(swap_distance(p)),
    }


@cache
def largest(n: int) -> dict[str, float]:
    """The largest value of each deviation over the wrong orders of n events (by enumeration, as the
    repository finds it: up to 9 events)."""
    if n > 9:
        raise PipelineError(
            f"a timeline question of {n} events: the largest deviations are enumerated up to 9"
        )
    wrong = [list(p) for p in itertools.permutations(range(n)) if list(p) != list(range(n))]
    values = [deviations(p) for p in wrong] or [deviations(list(range(n)))]
    return {name: max(v[name] for v in values) for name in NAMES}


def question_deviations(answer: str, prediction: str) -> tuple[dict[str, float], bool]:
    """The deviations of one prediction, and whether it ordered every event exactly once."""
    labels = [label.strip() for label in answer.split(",")]
    order = predicted_order(labels, prediction)
    if len(set(labels)) != len(labels) or sorted(order) != sorted(labels):
        return largest(len(labels)), False
    return deviations([order.index(label) for label in labels]), True


def reorder_scores(pairs: list[Any]) -> dict[str, Any]:
    """Mean deviations over the timeline questions among ``pairs`` (``.answer``, ``.prediction``, and
    ``.kind``, the question's type, where they have one)."""
    timeline = [p for p in pairs if is_reorder(p.answer, getattr(p, "kind", None))]
    scored = [question_deviations(p.answer, p.prediction) for p in timeline]
    if not scored:
        return {"n_questions": 0, "n_ordered": 0, "metrics": {name: None for name in NAMES}}
    return {
        "n_questions": len(scored),
        "n_ordered": sum(ok for _, ok in scored),
        "metrics": {name: float(np.mean([d[name] for d, _ in scored])) for name in NAMES},
    }
