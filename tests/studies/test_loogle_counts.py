"""`studies.validation.loogle_counts`: what each member of the study would count, from the tokenizers; a
data folder that is not there, or a --json whose folder is not, is one ``error:`` line before any
counting (on 803d062: a PipelineError traceback, and a FileNotFoundError after all the counting); so is
loogle_join's --results that is not there or no results.json."""

from __future__ import annotations

import argparse
import sys

import pytest

from studies.validation import loogle_counts, loogle_join


def test_a_limit_is_a_number_of_tokens_or_full():
    assert loogle_counts.limit_arg("4096") == 4096
    assert loogle_counts.limit_arg("full") is None
    for bad in ("1", "-5", "4k", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="number of tokens"):
            loogle_counts.limit_arg(bad)


def test_the_sample_counts_as_the_study_counted_it_and_limits_past_a_context_are_left_out():
    members = loogle_counts.counts("sample", (2048, 8192, None))["members"]
    # SmolLM2's context is 8192 tokens: its W=8192 would be its whole context, `full`.
    assert list(members) == [
        "smollm2-135m W=2048", "smollm2-135m full",
        "gemma3-270m W=2048", "gemma3-270m W=8192", "gemma3-270m full",
    ]  # fmt: skip
    # As the study counted the sample's 13 questions (docs/reports/loogle.md, count=all).
    counted = {label: m.get("counted", 0) for label, m in members.items()}
    assert counted["smollm2-135m W=2048"] == counted["gemma3-270m W=2048"] == 1
    assert (counted["smollm2-135m full"], counted["gemma3-270m full"]) == (8, 11)
    assert 1 <= counted["gemma3-270m W=8192"] <= 11
    assert all(sum(m.values()) == 13 for m in members.values())


def failed(capsys, monkeypatch, module, *argv: str) -> list[str]:
    """``module.main()`` on ``argv``: exit status 2 and its stderr's lines, nothing counted."""
    monkeypatch.setattr(sys, "argv", [module.__file__, *argv])
    for work in ("counts", "questions", "member_gains"):
        if hasattr(module, work):
            monkeypatch.setattr(module, work, lambda *a, **k: pytest.fail("worked before refusing"))
    with pytest.raises(SystemExit) as stopped:
        module.main()
    assert stopped.value.code == 2
    return capsys.readouterr().err.splitlines()


def test_inputs_and_outputs_are_checked_before_any_counting(capsys, monkeypatch, tmp_path):
    program = "python -m studies.validation.loogle_counts"
    assert failed(capsys, monkeypatch, loogle_counts, "--data", "sample", "/nonexistent") == [
        f"error: {program}: argument --data: '/nonexistent' is no folder here: sample, hub or a folder of "
        f"LooGLE's files ({program} --help lists its arguments)"
    ]
    (line,) = failed(
        capsys, monkeypatch, loogle_counts, "--data", "sample", "--json", str(tmp_path / "no/x.json")
    )
    assert line.startswith(f"error: {program}: argument --json: '{tmp_path / 'no/x.json'}': its folder ")
    (line,) = failed(capsys, monkeypatch, loogle_counts, "--json", str(tmp_path))
    assert line.endswith(
        f"'{tmp_path}' is a folder: name a file in it ({program} --help lists its arguments)"
    )
    (line,) = failed(capsys, monkeypatch, loogle_join, "--results", str(tmp_path / "none.json"))
    assert "argument --results: " in line and "does not exist" in line
    (tmp_path / "results.json").write_text('{"family": 3}')
    assert failed(capsys, monkeypatch, loogle_join, "--results", str(tmp_path / "results.json")) == [
        f"error: --results {tmp_path / 'results.json'}: no family with LooGLE metrics (a results.json of "
        "`make validate` on the sample: docs/reports/validation/results.json)"
    ]


def test_a_data_folder_without_the_task_is_one_line_before_any_model_loads(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["loogle_counts", "--data", str(tmp_path)])
    monkeypatch.setattr(loogle_counts, "counts", lambda *a, **k: pytest.fail("counted"))
    with pytest.raises(SystemExit) as stopped:
        loogle_counts.main()
    (line,) = capsys.readouterr().err.splitlines()
    assert stopped.value.code == 2 and line.startswith(f"error: {tmp_path} has no longdep_qa.jsonl")
