"""The LooGLE decode bench's sample summary compares every question's answers both ways: a document's
questions of two tasks keep their own keys, and a summary that lost an answer is an error."""

from __future__ import annotations

import pytest

from bench import loogle_decode
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
