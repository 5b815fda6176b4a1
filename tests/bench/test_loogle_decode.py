"""The LooGLE decode bench's sample summary compares every question's answers both ways: a document's
questions of two tasks keep their own keys, and a summary that lost an answer is an error. Its arguments
are checked before any case runs (on 803d062: --questions 0 and --prompt 3 failed inside the case), as
every bench's and study's are (``bench.shared``'s argument types)."""

from __future__ import annotations

import argparse
import sys

import pytest

from bench import loogle_decode, runner, shared
from pipeline.loogle.data.questions import Question


def row(way: str, answers: dict[str, list[int]], questions: int) -> dict:
    work = {"seconds": 2.0, "cpu_s": 3.0, "peak_bytes": 2**30}
    return {"size": "m", "contender": way, "answers": answers, "margins": {k: [1.0] * 3 for k in answers},
            "questions": questions, "cut": 0, "work": work}  # fmt: skip


def test_a_documents_questions_of_two_tasks_keep_their_own_keys():
    short, long = (Question(task, "doc", 0, "text", "q", "a") for task in ("shortdep_qa", "longdep_qa"))
    assert short.qid == long.qid and loogle_decode.key(short) != loogle_decode.key(long)


def test_the_summary_counts_every_answer_and_refuses_lost_ones():
    alone = row(loogle_decode.WAYS[0], {"a": [1, 2], "b": [3]}, 2)
    summary = loogle_decode.sample_summary([alone, row(loogle_decode.WAYS[1], {"a": [1, 2], "b": [4]}, 2)])
    assert summary["m"]["same_tokens"] == 1 and summary["m"]["flips"] == {"b": {"step": 0, "margin": 1.0}}
    with pytest.raises(RuntimeError, match="share a key"):
        loogle_decode.sample_summary([alone, row(loogle_decode.WAYS[1], {"a": [1, 2]}, 2)])


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--questions", "0"], "argument --questions: '0' is no whole number of at least 2"),
        (["--questions", "1"], "argument --questions: '1' is no whole number of at least 2"),
        (["--prompt", "3"], "--prompt 3 leaves no shared tokens before --question 64's own"),
        (["--new", "1"], "argument --new: '1' is no whole number of at least 2"),
        (["--batch-size", "-1"], "argument --batch-size: '-1' is no whole number of at least 1"),
        (["--tasks", "nope"], "argument --tasks: invalid choice: 'nope'"),
        (
            ["--json", "/nonexistent/x.json"],
            "argument --json: '/nonexistent/x.json': its folder /nonexistent",
        ),
        (["--nosuch"], "unrecognized arguments: --nosuch"),
    ],
)
def test_its_arguments_are_checked_before_any_case_runs(argv, said, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [loogle_decode.__file__, "--shape", "tiny", *argv])
    monkeypatch.setattr(runner, "run", lambda *a, **k: pytest.fail("a case ran"))
    with pytest.raises(SystemExit) as stopped:
        loogle_decode.main()
    (line,) = capsys.readouterr().err.splitlines()
    assert stopped.value.code == 2
    assert line == f"error: python -m bench.loogle_decode: {said}" + line.partition(said)[2]
    assert line.endswith("(python -m bench.loogle_decode --help lists its arguments)")


def test_the_argument_types(tmp_path):
    assert shared.whole(2)("3") == 3 and shared.whole(0)("0") == 0 and shared.above(0)("0.5") == 0.5
    for bad in ("1", "2.0", "x", "", "\u00b2"):
        with pytest.raises(argparse.ArgumentTypeError, match="is no whole number of at least 2"):
            shared.whole(2)(bad)
    for bad in ("0", "-1", "nan", "inf", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="is no finite number above 0"):
            shared.above(0)(bad)
    assert shared.output_file(str(tmp_path / "a.json")) == tmp_path / "a.json"
    for bad, said in ((tmp_path, "is a folder"), (tmp_path / "no" / "a.json", "does not exist")):
        with pytest.raises(argparse.ArgumentTypeError, match=said):
            shared.output_file(str(bad))
    assert shared.existing(str(tmp_path)) == tmp_path
    with pytest.raises(argparse.ArgumentTypeError, match="does not exist"):
        shared.existing(str(tmp_path / "none"))


def test_a_decode_steps_floor_is_the_bytes_it_reads_over_the_bandwidth():
    """Weights and each sequence's keys and values at mid-answer, in bfloat16; the shared prompt tokens
    read by every row as laid out, or once; no floor without a bandwidth."""
    import torch

    model = loogle_decode.random_model("tiny", "sdpa", "cpu")
    config = model.config
    weights = sum(p.numel() * 2 for p in model.parameters())
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_token = config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim * 2
    floor = loogle_decode.step_floor(model, 1000, 4, 600, 10, 1e9)
    assert next(model.parameters()).dtype == torch.bfloat16 and floor["kv_bytes_per_token"] == per_token
    assert floor["alone_ms"] == round(1e3 * (weights + 1005 * per_token) / 1e9, 2)
    assert floor["together_ms"] == round(1e3 * (weights + 4 * 1005 * per_token) / 1e9, 2)
    assert floor["together, shared read once_ms"] == round(
        1e3 * (weights + (600 + 4 * 405) * per_token) / 1e9, 2
    )
    assert loogle_decode.step_floor(model, 1000, 4, 600, 10, None) == {}
