"""Predictions files (`make loogle-metrics`, a resumed `make loogle`) read by a reader that refuses, in
one line naming the file, the line and the field and before any scoring, what no run writes: a limit
that is not a count, bytes that are not UTF-8, a qid of no question, Output/ pairs that are not
mappings, a prediction beyond its bound; and a long prediction is scored, not a RecursionError."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pipeline.errors import PipelineError
from pipeline.loogle.data.reading import DataSource, fingerprint, load_questions
from pipeline.loogle.generation import predictions
from pipeline.loogle.metrics import similarity
from pipeline.loogle.metrics.evaluation import MetricsOptions, evaluate, evaluate_file
from pipeline.results import loogle as loogle_results

SAMPLE = load_questions("shortdep_qa", DataSource())


def our_lines(**change) -> list[dict]:
    """A whole run's lines of the sample's shortdep_qa, each with ``change``."""
    line = {"task": "shortdep_qa", "data": "sample", "fingerprint": fingerprint(SAMPLE), "limit": None}
    line |= {"model": "m", "max_length": 100, "max_new_tokens": 3, "repetition_penalty": 1.0}
    return [{**line, "qid": q.qid, "prediction": "an answer", **change} for q in SAMPLE]


def write(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def refusal(path: Path, task: str = "shortdep_qa") -> str:
    with pytest.raises(PipelineError) as caught:
        evaluate(path, task, DataSource(), "false")
    assert "\n" not in str(caught.value)
    return str(caught.value)


@pytest.mark.parametrize("limit", [float("nan"), "3", [3], 0, True])
def test_a_limit_that_is_not_a_count(tmp_path, limit):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in our_lines(limit=limit)))  # NaN as JSON's NaN
    assert f"{path}, line 1, field limit: " in refusal(path) and "not a whole number" in refusal(path)


def test_bytes_that_are_not_utf8(tmp_path):
    path = write(tmp_path / "p.jsonl", our_lines())
    path.write_bytes(path.read_bytes().replace(b"an answer", b"an \xe9answer", 1))
    assert f"{path}, line 1: byte 0xe9 at column" in refusal(path)


def test_a_qid_that_names_no_question(tmp_path):
    rows = our_lines()
    rows[3]["qid"] = "Nobody#0"
    message = refusal(write(tmp_path / "p.jsonl", rows))
    assert "line 4, field qid: 'Nobody#0' names no question of these" in message
    rows[3]["qid"] = ["a", "list"]
    assert "line 4, field qid: expected a string, not a list" in refusal(write(tmp_path / "p.jsonl", rows))


def official(**fields) -> dict:
    return {
        "qa_pairs": [{"Q": "Why?", "A": "So.", "S": "x"}],
        "llm_output": ["So."],
        "output": ["So."],
    } | fields


@pytest.mark.parametrize(
    "line, message",
    [
        (
            official(qa_pairs=["not a mapping"]),
            r"line 1, field qa_pairs\[0\]: expected a mapping whose Q is text",
        ),
        (official(qa_pairs="[3]"), r"line 1, field qa_pairs\[0\]: expected a mapping whose Q is text"),
        (official(qa_pairs=[{"Q": {"a": 1}}]), r"field qa_pairs\[0\]: expected a mapping whose Q is text"),
        (official(llm_output=[["a list"]]), r"line 1, field llm_output\[0\]: is a list, not text"),
    ],
)
def test_output_lines_of_the_wrong_shape(tmp_path, line, message):
    import re

    assert re.search(message, refusal(write(tmp_path / "o.jsonl", [line])))


def test_an_output_summary_line_is_never_told_it_has_questions_it_has_not(tmp_path):
    path = write(tmp_path / "s.jsonl", [official(qa_pairs=None) | {"question": None}])
    result = evaluate(path, "longdep_summarization", DataSource(), "false")  # no questions: a summary
    assert result["n_questions"] == 1
    message = refusal(write(tmp_path / "s.jsonl", [official(qa_pairs=5)]), "longdep_summarization")
    assert "field qa_pairs: a number, where a summary line has" in message and "has questions" not in message
    message = refusal(write(tmp_path / "s.jsonl", [official()]), "longdep_summarization")
    assert "has 1 questions (qa_pairs), so it is not of task longdep_summarization" in message


def test_a_prediction_beyond_its_bound_is_refused_before_scoring(tmp_path, monkeypatch):
    rows = our_lines()
    rows[2]["prediction"] = "word " * 200_000  # 1 MB: a RecursionError inside rouge after a minute
    started = time.perf_counter()
    message = refusal(write(tmp_path / "p.jsonl", rows))
    assert "line 3, field prediction: holds 1000000 characters, over the limit of 100000" in message
    assert time.perf_counter() - started < 10
    rows[2]["prediction"] = "a " * 10_001
    assert "holds 10001 words, over the limit of 10000" in refusal(write(tmp_path / "p.jsonl", rows))
    line = official(llm_output=["word " * 30_000])
    assert r"field llm_output[0]: holds 150000 characters" in refusal(write(tmp_path / "o.jsonl", [line]))
    monkeypatch.setattr(predictions, "MAX_PREDICTIONS_BYTES", 100)
    assert "over the 100-byte limit of one such file" in refusal(write(tmp_path / "p.jsonl", our_lines()))


def test_a_long_prediction_within_the_bound_is_scored():
    sentence = " ".join(f"w{i % 50}" for i in range(3000))  # one sentence of 3,000 words, no period
    assert similarity.similarity("w1 w2 w3", sentence, with_meteor=False)["rougeL"] == pytest.approx(1.0)


def test_a_results_line_the_reader_would_refuse_is_refused_before_scoring(tmp_path, monkeypatch):
    monkeypatch.setattr("pipeline.loogle.metrics.evaluation.score_task", lambda *a: pytest.fail("scored"))
    results = tmp_path / "loogle.jsonl"
    for change, field in (
        ({"model": ["a list"]}, "model_name"),
        ({"max_length": "long"}, "settings.max_length"),
    ):
        path = write(tmp_path / "p.jsonl", our_lines(**change))
        options = MetricsOptions(
            str(path), "shortdep_qa", "sample", "x", bertscore="false", results=str(results)
        )
        with pytest.raises(PipelineError, match=rf"p.jsonl, line 1 .*`{field}`"):
            evaluate_file(options)
    assert not results.exists()


def test_an_output_file_gets_its_results_line(tmp_path):
    """A file of LooGLE's Output/ format records no run settings (max_length): its line is written and
    read back."""
    path = write(tmp_path / "o.jsonl", [official()])
    results = tmp_path / "loogle.jsonl"
    evaluate_file(
        MetricsOptions(str(path), "shortdep_qa", "sample", "x", bertscore="false", results=str(results))
    )
    (line,) = loogle_results.read_rows(results)
    assert line["settings"]["data"] == "LooGLE Output/" and "max_length" not in line["settings"]


def test_a_resumed_file_of_another_run_names_the_setting_that_exists(tmp_path):
    settings = {"task": "shortdep_qa", "data": "sample", "fingerprint": fingerprint(SAMPLE), "model": "m"}
    path = write(tmp_path / "p.jsonl", our_lines())
    with pytest.raises(PipelineError, match=r"\(model=m \(now n\)\): pass predictions_dir=<another folder>"):
        predictions.resumed(path, {**settings, "model": "n"}, [q.qid for q in SAMPLE])
    record = {"kind": "local", "spec": "x", "weights_sha256": {"a": "1"}}
    path = write(tmp_path / "p.jsonl", our_lines(model_record=record))
    other = {**record, "weights_sha256": {"a": "2"}}
    with pytest.raises(PipelineError, match="another model: its weights, tokenizer or config differ"):
        predictions.resumed(path, settings, [q.qid for q in SAMPLE], other)
    assert len(predictions.resumed(path, settings, [q.qid for q in SAMPLE], record)) == len(SAMPLE)
    with pytest.raises(PipelineError, match="names no question of this run"):
        predictions.resumed(path, settings, [q.qid for q in SAMPLE[1:]], record)
