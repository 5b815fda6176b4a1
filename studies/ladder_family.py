"""The validation of docs/ladder.md: do the context ladder's effective lengths order the `make validate`
family members (conf/validate.yaml: both embedded models at W = 256, 1024, 2048 and full) as their
answer-token accuracy does (docs/reports/validation/results.json)? Read from the ladder lines of both
models on the default artifact (no model runs).

A member limited to W tokens is, on its model's ladder, the rungs up to W with rung W as its full
context (the rungs below W limit the same key tokens for it as for the model); its effective length
is read from those rungs as the model's is from all of them. A member whose W is below the lowest rung
has no rung to read: its length is at most W by construction. Also checks that the ladder's LongPPL at
W on the first 5 documents (validate's GovReport documents) is validate's member value.

    .venv/bin/python -m studies.ladder_family docs/reports/ladder/ladder.jsonl \
        docs/reports/ladder/ladder-gemma.jsonl
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np

from bench.shared import ROOT, arguments, existing
from pipeline.ladder.effective import LadderSums, effective_length
from pipeline.results.ladder import read_rows, reading_text


def member_sums(sums: LadderSums, limit: int | None) -> LadderSums | None:
    """The ladder of a member limited to ``limit`` tokens (None: the model's), or None if no rung is below."""
    if limit is None:
        return sums
    if limit not in sums.rungs or sums.rungs.index(limit) == 0:
        return None
    k = sums.rungs.index(limit)
    limited = np.concatenate([sums.limited[:, :k], np.zeros((len(sums.key_n), 1), dtype=np.int64)], 1)
    return LadderSums((*sums.rungs[:k], None), sums.key_nll[:, : k + 1], sums.key_n, limited)


def bounds(reading: dict, limit: int | None) -> tuple[float, float]:
    """What the effective length says, as an interval of lengths: exact, above a rung, at most a rung.
    A member limited to W tokens uses at most W: that bounds a right-censored length from above."""
    if reading is None:
        return 0.0, float(limit)
    if reading["censored"] == "right":
        return reading["top"] + 0.5, math.inf if limit is None else float(limit)
    if reading["censored"] == "left":
        return 0.0, float(reading["length"])
    return float(reading["length"]), float(reading["length"])


def pairs(rows: list[dict]) -> tuple[int, int, int]:
    """Member pairs with different accuracies: the effective lengths order them the same way, the other
    way, or cannot tell (equal, or censored so that the intervals overlap)."""
    same = other = undecided = 0
    for a, b in itertools.combinations(rows, 2):
        if a["accuracy"] == b["accuracy"]:
            continue
        high, low = (a, b) if a["accuracy"] > b["accuracy"] else (b, a)
        if high["bounds"][0] > low["bounds"][1]:
            same += 1
        elif high["bounds"][1] < low["bounds"][0]:
            other += 1
        else:
            undecided += 1
    return same, other, undecided


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("ladders", nargs="+", type=existing)
    parser.add_argument(
        "--validation", type=existing, default=ROOT / "docs" / "reports" / "validation" / "results.json"
    )
    args = parser.parse_args()
    ladders = {row["model_name"]: row for path in args.ladders for row in read_rows(path)}
    validation = json.loads(args.validation.read_text())
    out: list[dict] = []
    lines = [
        "| member | answer-token accuracy | effective length (5%) | 95% interval "
        "| LongPPL at W, 13 documents | 5 documents: ladder / validate - 1 |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for member in validation["family"]:
        row, limit = ladders[member["model"]], member["context_limit"]
        sums = LadderSums.of_row(row)
        part = member_sums(sums, limit)
        settings = row["effective"]
        reading = None if part is None else effective_length(
            part, settings["tolerance"], bootstrap=settings["bootstrap"], seed=settings["seed"],
            confidence=settings["confidence"])["effective"]  # fmt: skip
        text, interval = (f"<={limit}", "(no rung below W)") if reading is None else reading_text(reading)
        r = sums.rungs.index(limit) if limit in sums.rungs else None
        longppl = "" if r is None else f"{row['rungs'][r]['corpus']['longppl']:.3f}"
        check = ""
        if r is not None:
            five = math.exp(sums.key_nll[:5, r].sum() / sums.key_n[:5].sum())
            check = f"{five / member['evaluators']['gemma3-270m']['longppl'] - 1:+.1e}"
        out.append({"accuracy": member["token_accuracy"], "bounds": bounds(reading, limit)})
        accuracy = f"{member['token_accuracy']:.1%}"
        lines.append(f"| {member['label']} | {accuracy} | {text} | {interval} | {longppl} | {check} |")
    same, other, undecided = pairs(out)
    lines.append(
        f"\nPairs of members with different accuracies: {same} ordered the same way by the effective "
        f"length, {other} the other way, {undecided} that it cannot order (equal or censored)."
    )
    print("\n".join(lines))


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
