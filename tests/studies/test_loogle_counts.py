"""`studies.validation.loogle_counts`: what each member of the study would count, from the tokenizers."""

from __future__ import annotations

import argparse

import pytest

from studies.validation import loogle_counts


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
