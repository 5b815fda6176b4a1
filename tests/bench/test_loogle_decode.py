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
