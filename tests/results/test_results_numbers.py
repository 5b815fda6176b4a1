"""Results readers on hand-edited lines: an integer of 400 or 5000 digits in any results file, and a LooGLE
line whose settings or reorder deviations are of the wrong type, or a metric outside its range (a
BERTScore of -5 on 803d062 was shown), are one error naming the file, the line and the field (on
70baafc: OverflowError, Python's 4300-digit ValueError without the field, KeyError or AttributeError
inside `make leaderboard`); what a message shows of a number is bounded."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from pipeline.commands import leaderboard as leaderboard_command
from pipeline.errors import PipelineError
from pipeline.loogle.generation.answering import RunSettings
from pipeline.loogle.metrics.reorder import reorder_scores
from pipeline.reporting import loogle as loogle_board
from pipeline.reporting.common import fmt
from pipeline.results import forgetting, ladder
from pipeline.results import loogle as loogle_lines
from pipeline.results.lmeval import read_lmeval_results
from pipeline.results.score import read_scores
from tests.support import base_rows, compose_config, genuine_line, write_lines

HUGE = 10**400  # beyond a float (OverflowError on 70baafc)
DIGITS_5000 = "1" + "0" * 4999  # beyond what Python reads as an int (its 4300-digit limit)


def loogle_line(**edits) -> dict:
    """A LooGLE results line as `make loogle` writes it (longdep_qa: with its reorder deviations)."""
    settings = RunSettings("longdep_qa", "sample", "f" * 16, "tiny", 4096, 64, None)
    pairs = [SimpleNamespace(answer="I,II,III", prediction="II,I,III")]
    metrics = {"bleu1": 0.25, "rouge1": 0.5, "meteor": None}
    result = {
        "task": "longdep_qa", "n_questions": 3, "metrics": metrics, "unavailable": {"meteor": "no WordNet"},
        "reorder": reorder_scores(pairs), "predictions": "artifacts/loogle/p.jsonl",
    }  # fmt: skip
    model = {"spec": "tiny", "kind": "local", "weights_sha256": "0" * 64}
    line = loogle_lines.loogle_row("tiny", model, result, settings.record(), 1.5, 1.0)
    line.update(edits)
    return line


def test_a_line_as_make_loogle_writes_it_is_written_read_and_shown(tmp_path):
    """The schema now checks ``settings`` and ``reorder``: the lines `make loogle` writes still pass."""
    path = tmp_path / "loogle.jsonl"
    loogle_lines.append(path, loogle_line())
    (row,) = loogle_lines.read_rows(path)
    assert row["reorder"]["n_questions"] == 1 and row["settings"]["max_length"] == 4096
    (cells,) = loogle_board.table(path)
    mean = fmt(row["reorder"]["metrics"]["location_mean"])
    assert (cells["n_questions"], cells["max_length"], cells["reorder_location_mean"]) == ("3", "4096", mean)


HUGE_LINES = {  # reader, the line, the field named
    "a count of 401 digits": (
        "scores",
        lambda: edited(genuine_line(), "corpus", n_tokens=HUGE),
        r"`corpus\.n_tokens` is an integer of 401",
    ),
    "a count of 5000 digits": (
        "scores",
        lambda: raw(genuine_line(), "corpus.n_tokens", DIGITS_5000),
        r"`corpus\.n_tokens` is an integer of 5000",
    ),
    "a curve's accuracy": (
        "forgetting",
        lambda: {
            "schema": "forgetting-curve/1",
            "points": [{"length": 1, "beyond_context": False, "copy_mean": HUGE}],
        },
        r"`points\[0\]\.copy_mean` is an integer of 401",
    ),
    "a rung's seconds": (
        "ladder",
        lambda: {"schema": "context-ladder/1", "rungs": [{"context_limit": 1, "seconds": HUGE}]},
        r"`rungs\[0\]\.seconds` is an integer of 401",
    ),
    "LooGLE's wall time": (
        "loogle",
        lambda: loogle_line(wall_seconds=HUGE),
        r"`wall_seconds` is an integer of 401",
    ),
    "LooGLE's questions": (
        "loogle",
        lambda: loogle_line(n_questions=HUGE),
        r"`n_questions` is an integer of 401",
    ),
}
READERS = {
    "scores": read_scores, "forgetting": forgetting.read_rows, "ladder": ladder.read_rows,
    "loogle": loogle_lines.read_rows,
}  # fmt: skip


@pytest.mark.parametrize("case", list(HUGE_LINES))
def test_an_integer_beyond_any_line_is_one_error_naming_the_field(tmp_path, case):
    reader, line, said = HUGE_LINES[case]
    made = line()
    path = tmp_path / "r.jsonl"
    path.write_text((made if isinstance(made, str) else json.dumps(made)) + "\n")
    with pytest.raises(
        PipelineError, match=rf"^{re.escape(str(path))} line 1 is not a valid .*\({said} digits, beyond"
    ):
        READERS[reader](path)
    with pytest.raises(PipelineError) as error:
        READERS[reader](path)
    assert len(str(error.value)) < 300  # the number is not shown in full


def edited(line: dict, part: str, **values) -> dict:
    line[part].update(values)
    return line


def raw(line: dict, field: str, literal: str) -> str:
    """The line as JSON with ``field`` (``a.b``) holding the number ``literal`` as written."""
    part, name = field.split(".")
    line[part][name] = "PLACEHOLDER"
    return json.dumps(line).replace('"PLACEHOLDER"', literal)


def test_a_count_below_the_bound_is_shown_bounded(tmp_path):
    """10^100 passes as a float; as a count it is refused, and its 101 digits are not printed."""
    path = write_lines(tmp_path / "scores.jsonl", [edited(genuine_line(), "corpus", n_tokens=10**100)])
    with pytest.raises(
        PipelineError, match=r"`corpus\.n_tokens` is an integer of 101 digits: a count lies in"
    ):
        read_scores(path)


BAD_LOOGLE = {
    "settings without max_length": (
        lambda line: line["settings"].pop("max_length"),
        r"`settings\.max_length` is missing",
    ),
    "max_length a string": (
        lambda line: line["settings"].update(max_length="abc"),
        r"`settings\.max_length`",
    ),
    "limit a list": (lambda line: line["settings"].update(limit=[1]), r"`settings\.limit`"),
    "reorder metrics a string": (lambda line: line["reorder"].update(metrics="x"), r"`reorder\.metrics`"),
    "a reorder metric a string": (
        lambda line: line["reorder"]["metrics"].update(location_mean="x"),
        r"`reorder\.metrics\.location_mean`",
    ),
    "reorder count negative": (
        lambda line: line["reorder"].update(n_questions=-1),
        r"`reorder\.n_questions`",
    ),
    "n_questions of 31 digits": (
        lambda line: line.update(n_questions=10**30),
        r"`n_questions` is 10{30}: a length is an integer in \[0, 2\*\*63\)",
    ),
    # each metric within its range: a BERTScore of -5 or 7 was shown in loogle.md
    "BERTScore -5": (
        lambda line: line["metrics"].update(bertscore=-5.0),
        r"`metrics\.bertscore` is -5\.0, outside BERTScore's range \[-1, 1\]",
    ),
    "BERTScore 7": (
        lambda line: line["metrics"].update(bertscore=7.0),
        r"`metrics\.bertscore` is 7\.0, outside BERTScore's range \[-1, 1\]",
    ),
    "BLEU-1 above 1": (
        lambda line: line["metrics"].update(bleu1=1.5),
        r"`metrics\.bleu1` is 1\.5, outside BLEU-1's range \[0, 1\]",
    ),
    "ROUGE-L negative": (
        lambda line: line["metrics"].update(rougeL=-0.1),
        r"`metrics\.rougeL` is -0\.1, outside ROUGE-L's range",
    ),
    "partial match above 1": (
        lambda line: line["metrics"].update(partial_match=2.0),
        r"`metrics\.partial_match` is 2\.0, outside partial match's range",
    ),
    "a reorder deviation negative": (
        lambda line: line["reorder"]["metrics"].update(swap=-1.0),
        r"`reorder\.metrics\.swap` is -1\.0, outside a deviation's range at least 0",
    ),
    "more ordered than questions": (
        lambda line: line["reorder"].update(n_ordered=5),
        r"`reorder\.n_ordered` is 5, more than its 1 questions",
    ),
}


@pytest.mark.parametrize("case", list(BAD_LOOGLE))
def test_make_leaderboard_refuses_a_loogle_line_of_the_wrong_type_in_one_line(tmp_path, case):
    """The LooGLE table of `make leaderboard` (loogle.jsonl beside the scores): on 70baafc its schema left
    ``settings`` and ``reorder`` unchecked (KeyError, AttributeError or a wrong cell in the board) and
    printed a huge ``n_questions`` in full."""
    edit, said = BAD_LOOGLE[case]
    bad = loogle_line()
    edit(bad)
    scores = write_lines(tmp_path / "scores.jsonl", base_rows())
    path = write_lines(tmp_path / "loogle.jsonl", [loogle_line(), bad])
    assert len(loogle_board.table(write_lines(tmp_path / "good.jsonl", [loogle_line()]))) == 1
    cfg = compose_config("leaderboard", [f"results={scores}", f"out_dir={tmp_path / 'out'}"])
    with pytest.raises(
        PipelineError, match=rf"^{re.escape(str(path))} line 2 is not a valid LooGLE result \({said}"
    ):
        leaderboard_command.run(cfg)


def test_an_lm_eval_results_file_with_a_huge_integer_is_one_error(tmp_path):
    """A LongPPL task's value or its count of documents of 400 digits (on 70baafc: OverflowError), and
    a date of 400 digits (no time: left out)."""
    task = "longppl_x"
    record = {"name": "x", "contents": "c" * 64, "identity": {"discrete": "d" * 64, "documents": {}}}
    data = {
        "results": {task: {"ppl,none": 12.5, "longppl,none": HUGE}},
        "configs": {task: {"metadata": {"longppl_fingerprint": "f" * 64, "longppl_artifact_record": record}}},
        "config": {"longppl_model_name": "m"},
        "n-samples": {task: {"original": 2, "effective": 2}},
        "date": HUGE,
    }
    path = tmp_path / "results_x.json"
    path.write_text(json.dumps(data))
    with pytest.raises(
        PipelineError, match=rf"task {task}: `results\.{task}\.longppl,none` is an integer of 401"
    ):
        read_lmeval_results(path)
    data["results"][task]["longppl,none"] = 6.5
    path.write_text(json.dumps(data))
    (row,) = read_lmeval_results(path).frame.to_dicts()
    assert row["longppl"] == 6.5 and row["date"] is None


def test_metrics_at_the_ends_of_their_ranges_are_read():
    """A BERTScore of -1 or 1 (and float32's rounding past 1), a BLEU of 0 or 1: read and shown."""
    for edits in ({"bertscore": -1.0, "bleu1": 0.0}, {"bertscore": 1.0000001, "bleu1": 1.0, "rouge1": 1.0}):
        line = loogle_line()
        line["metrics"].update(edits)
        loogle_lines.check(line, "a line")
