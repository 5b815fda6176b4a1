"""Timeline reorder: the long-dependency questions whose answer is an order of labelled events ("II,I,III"
or "2,1,3"), scored by how far the predicted order is from the answer's. A question is one by the data's
``type`` where it has one (LooGLE's "timeline_reorder", its ``Output/`` files' "时间线"); without a type,
by an answer whose labels form a permutation (each of 1..n, or of I..n, once; n at least 2), so a
computed "20,300" is never taken for an order of two events. LooGLE's own code reads no type (its
``reorder_eval.py`` scores a file of timeline questions alone), so how a type is read is this module's:
compared after Unicode NFKC (a no-break space is a space), case folding, "_", "-" and "&" read as
spaces and "and", and runs of whitespace as one space ("Timeline  Reorder" is "timeline_reorder"); a
type that is only whitespace is no type; any other type of a long-dependency question that is none of
LooGLE's four (``TYPES``) is refused when the questions load, before any model does.

The repository's ``Reorder/reorder_eval.py`` cannot compute these on its released answers: it indexes a
list of label strings as positions (every value becomes "None") and replaces a computed value by the
maximum. Here the deviations are those its ``get_reorder_deviation.py`` defines, on positions: with
``p[j]`` the predicted position of the answer's j-th event, location square deviation mean((p[j]-j)^2),
location mean deviation mean(|p[j]-j|), swap deviation (the fewest swaps: n minus the cycles of p) and
swap distance deviation (its greedy sum of swap distances). The predicted order is the answer's labels in
their order of first appearance in the prediction; a prediction that does not order every event exactly
once scores the largest deviation any wrong order of n events has (its ``get_max_deviation.py``, which
enumerates the n! orders: 45 s for 9 events, and each further event multiplies that by about n).

Both are computed in closed form here, in time linear in n, so a question of any number of events is
scored at once. The greedy always finds a swap (i < j) that moves both events all the way towards their
places, p[j] <= i < j <= p[i] (take i the last index with p[i] > i: every later place k holds p[k] <= k,
so the p[i] - i places i+1..p[i] cannot all hold values in (i, p[i]), which are one fewer), and such a
swap lowers the summed displacement by 2(j - i), the most any swap of that distance can; so the
greedy's sum of distances is half the summed displacement sum |p[j] - j|. The largest deviations over
the wrong orders of n >= 2 events: the reversal's (n^2 - 1) / 3 (location square) and floor(n^2 / 2) / n
(location mean; the largest summed displacement is floor(n^2 / 2)), n - 1 swaps (one cycle of all n) and
floor(n^2 / 4) (half the largest displacement).
``tests/loogle/test_metrics.py`` checks both against the repository's enumeration and greedy.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import numpy as np

from pipeline.errors import PipelineError

ORDER = re.compile(r"^\s*([IVXLCDM]+|\d+)(\s*,\s*([IVXLCDM]+|\d+))+\s*$")
NAMES = ("location_square", "location_mean", "swap", "swap_distance")
# LooGLE's long-dependency question types, normalized (``normal_type``); its Output/ files type a timeline
# question "时间线", and "timeline" alone is read as one.
TIMELINE_TYPES = ("timeline reorder", "timeline", "时间线")
TYPES = ("comprehension and reasoning", "multiple information retrieval", "computation", *TIMELINE_TYPES)


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


def normal_type(kind: str) -> str:
    """A question type as it is compared: NFKC, case folded, "_" and "-" as spaces, "&" as "and", each
    run of whitespace one space (module doc)."""
    text = unicodedata.normalize("NFKC", kind).casefold().replace("&", " and ")
    return " ".join(re.sub(r"[_\-]", " ", text).split())


def is_timeline_type(kind: str) -> bool:
    return normal_type(kind) in TIMELINE_TYPES


def check_type(kind: str | None, where: str) -> None:
    """A long-dependency question's type is none, or one of LooGLE's (``TYPES``, normalized); else one
    line naming the question, the type and the fix."""
    if kind is None or not normal_type(kind) or normal_type(kind) in TYPES:
        return
    known = "comprehension_and_reasoning, multiple_information_retrieval, computation, timeline_reorder"
    raise PipelineError(
        f"longdep_qa {where}: type {kind[:60]!r} is none of LooGLE's question types ({known}; or 时间线): "
        "correct it in the data, or remove it (an untyped question whose answer is an order of labels, "
        "such as 2,1,3, is a timeline question)"
    )


def is_reorder(answer: Any, kind: str | None = None) -> bool:
    """A timeline question: by its type where the data gives one, else by an answer that is a
    permutation of labels. A question typed a timeline whose answer is no such order is an error."""
    if kind is None or not normal_type(kind):
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
    """Every long-dependency question's type is none or LooGLE's, and one typed a timeline has an order
    for its answer (``.answer``, ``.kind``): checked when the questions load, before any model does."""
    for number, question in enumerate(questions if task == "longdep_qa" else ()):
        check_type(question.kind, getattr(question, "qid", None) or f"question {number}")
        is_reorder(question.answer, question.kind)


def predicted_order(labels: list[str], prediction: str) -> list[str]:
    """The answer's labels in their order of first appearance in the prediction (as whole words)."""
    found, known = re.findall(r"\b(?:[IVXLCDM]+|\d+)\b", prediction), set(labels)
    return list(dict.fromkeys(label for label in found if label in known))


def swap_distance(p: list[int]) -> int:
    """The repository's greedy swap distance (the sum of the distances of its swaps), in closed form:
    half the summed displacement (module doc)."""
    return sum(abs(v - i) for i, v in enumerate(p)) // 2


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


def largest(n: int) -> dict[str, float]:
    """The largest value of each deviation over the wrong orders of n events, in closed form (module
    doc; the repository enumerates them); n = 1 has no wrong order, and its deviations are 0."""
    if n < 2:
        return dict.fromkeys(NAMES, 0.0)
    return {
        "location_square": (n * n - 1) / 3,
        "location_mean": (n * n // 2) / n,
        "swap": float(n - 1),
        "swap_distance": float(n * n // 4),
    }


def question_deviations(answer: str, prediction: str) -> tuple[dict[str, float], bool]:
    """The deviations of one prediction, and whether it ordered every event exactly once."""
    labels = [label.strip() for label in answer.split(",")]
    order = predicted_order(labels, prediction)
    if len(set(labels)) != len(labels) or sorted(order) != sorted(labels):
        return largest(len(labels)), False
    place = {label: position for position, label in enumerate(order)}
    return deviations([place[label] for label in labels]), True


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
