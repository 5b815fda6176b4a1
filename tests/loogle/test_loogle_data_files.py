"""LooGLE's data files read by a reader that refuses, in one line naming the file, the row and the
field, what no LooGLE file holds: mixed layouts, rows that are not objects or lack their text, bytes
that are not UTF-8, a Parquet file that is not Parquet, a lone surrogate, a question that is not text,
two documents of one title, a file or a string beyond its bound; and a document without a title gets
an id from its place in the file, never the file's path."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from pipeline.errors import PipelineError
from pipeline.loogle.data import bounds, questions
from pipeline.loogle.data.questions import questions_from_rows
from pipeline.loogle.data.reading import DataSource, fingerprint, load_questions

DOC = {"title": "Alpha", "input": "A text.", "qa_pairs": "[{'Q': 'Why?', 'A': 'So.', 'S': ['A text.']}]"}
ROW = {"title": "Alpha", "context": "A text.", "question": "Why?", "answer": "So."}


def folder_with(tmp_path: Path, *rows, task: str = "shortdep_qa", raw: bytes | None = None) -> DataSource:
    """A data folder whose ``task`` file holds ``rows`` (one JSON line each) or the bytes ``raw``."""
    data = raw if raw is not None else "".join(json.dumps(r) + "\n" for r in rows).encode()
    (tmp_path / f"{task}.jsonl").write_bytes(data)
    return DataSource(str(tmp_path))


def refusal(source: DataSource, task: str = "shortdep_qa") -> str:
    with pytest.raises(PipelineError) as caught:
        load_questions(task, source)
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "rows, expected",
    [
        ([DOC, ROW], r"row 1: no field input \(row 0 has one document per row\); the file mixes"),
        ([ROW, DOC], r"row 1: no field context \(row 0 has one question per row\); the file mixes"),
        ([DOC, {"title": "B", "qa_pairs": "none"}], "row 1: no field input"),
        ([ROW, {"title": "B", "answer": "x"}], "row 1: no field context"),
        (
            [DOC, {**DOC, "title": "B", "input": ["A", "list"]}],
            "row 1, field input: expected a string, got a list",
        ),
        (
            [{**DOC, "qa_pairs": "[{'Q': {'a': 1}, 'A': 'x'}]"}],
            "row 0 item 0, field Q: expected a string, got an obj",
        ),
        ([{**ROW, "question": {"a": 1}}], "row 0, field question: expected a string, got an object"),
        ([{**ROW, "type": {"a": 1}}], "row 0, field type: expected a string, got an object"),
        (
            [{**DOC, "qa_pairs": "[{'Q': 'q', 'A': 'x', 'type': ['timeline_reorder']}]"}],
            "row 0 item 0, field type: expected a string, got a list",
        ),
        (
            [{**ROW, "title": ["A"]}],
            "row 0, field title: a document id is text or a whole number, not a list",
        ),
    ],
)
def test_a_row_of_the_wrong_shape_is_one_line_naming_the_row_and_field(tmp_path, rows, expected):
    message = refusal(folder_with(tmp_path, *rows))
    assert str(tmp_path / "shortdep_qa.jsonl") in message
    assert re.search(expected, message), message


def test_a_row_that_is_not_an_object(tmp_path):
    raw = (json.dumps(DOC) + "\n" + json.dumps([1, 2]) + "\n").encode()
    assert "line 2: a row must be a JSON object, not a list" in refusal(folder_with(tmp_path, raw=raw))
    with pytest.raises(PipelineError, match=r"rows row 1: a row must be an object, not a string"):
        questions_from_rows("shortdep_qa", [DOC, "text"], "rows")  # the Hub's rows are checked alike


def test_bytes_that_are_not_utf8(tmp_path):
    raw = json.dumps(DOC).encode() + b"\n" + json.dumps(DOC).encode().replace(b"A text.", b"A t\xffext.")
    message = refusal(folder_with(tmp_path, raw=raw))
    assert "shortdep_qa.jsonl, line 2: byte 0xff at column" in message and "not UTF-8" in message


def test_a_parquet_file_that_is_not_parquet(tmp_path):
    (tmp_path / "shortdep_qa.parquet").write_text(json.dumps(DOC))
    message = refusal(DataSource(str(tmp_path)))
    assert f"{tmp_path / 'shortdep_qa.parquet'}: not a Parquet file" in message


@pytest.mark.parametrize(
    "row, field",
    [
        (
            {**ROW, "evidence": ["fine", "bro\ud800ken"]},
            r"row 0, field evidence\[1\]: holds a lone surrogate",
        ),
        ({**ROW, "answer": "s\udc00"}, "row 0, field answer: holds a lone surrogate"),
        (
            {**DOC, "qa_pairs": "[{'Q': 'Why?', 'A': 'x', 'S': ['\\ud800']}]"},
            r"item 0, field item.S\[0\]: holds a",
        ),
    ],
)
def test_a_lone_surrogate_in_any_string_is_refused(tmp_path, row, field):
    message = refusal(folder_with(tmp_path, row))
    assert re.search(field, message) and re.search(r"'\\ud[89abcdef][0-9a-f]{2}'", message), message


def test_two_documents_with_one_title_are_refused_at_read_time(tmp_path):
    other = {**DOC, "input": "Another text."}
    message = refusal(folder_with(tmp_path, DOC, other))
    assert "rows 0 and 1: two documents with the id 'Alpha'" in message
    assert "give each document its own title (or id) in the data" in message
    rows = [ROW, {**ROW, "context": "Another text."}]
    message = refusal(folder_with(tmp_path, *rows))
    assert "rows 0 and 1: two documents with the id 'Alpha'" in message
    # one document's questions in the question layout share its title and text: one document
    (a, b) = load_questions("shortdep_qa", folder_with(tmp_path, ROW, {**ROW, "question": "How?"}))
    assert (a.qid, b.qid) == ("Alpha#0", "Alpha#1")


def test_an_untitled_document_is_named_by_its_place_never_the_files_path(tmp_path):
    rows = [{k: v for k, v in DOC.items() if k != "title"}, {**DOC, "title": "", "input": "Other."}]
    first, second = tmp_path / "one", tmp_path / "two" / "deeper"
    first.mkdir(), second.mkdir(parents=True)
    questions = load_questions("shortdep_qa", folder_with(first, *rows))
    moved = load_questions("shortdep_qa", folder_with(second, *rows))
    assert [q.qid for q in questions] == [q.qid for q in moved] == ["doc-0#0", "doc-1#0"]
    assert fingerprint(questions) == fingerprint(moved)


def test_the_sample_and_a_copy_of_it_keep_their_ids_and_fingerprint(tmp_path):
    from pipeline.loogle.data.questions import SAMPLE_DIR

    shutil.copy(SAMPLE_DIR / "shortdep_qa.jsonl", tmp_path)
    sample, copy = (load_questions("shortdep_qa", DataSource(d)) for d in ("sample", str(tmp_path)))
    assert sample == copy and fingerprint(sample) == "6957312efe78"  # the number shipped data gives


def test_sizes_are_bounded_each_said_in_the_error(tmp_path, monkeypatch):
    source = folder_with(tmp_path, DOC)
    monkeypatch.setattr(bounds, "MAX_FIELD_CHARS", 4)
    assert "field title: holds 5 characters, over the limit of 4" in refusal(source)
    monkeypatch.setattr(bounds, "MAX_TEXT_CHARS", 6)
    monkeypatch.setattr(bounds, "MAX_FIELD_CHARS", 10**6)
    assert "field input: holds 7 characters, over the limit of 6" in refusal(source)
    monkeypatch.setattr(bounds, "MAX_DATA_BYTES", 20)
    assert "bytes, over the 20-byte limit of one such file" in refusal(source)
    monkeypatch.setattr(bounds, "MAX_DATA_BYTES", 10**9)
    monkeypatch.setattr(bounds, "MAX_TEXT_CHARS", 10**6)
    monkeypatch.setattr(bounds, "MAX_ROWS", 1)
    monkeypatch.setattr(questions, "MAX_ROWS", 1)
    assert "more than 1 rows" in refusal(folder_with(tmp_path, DOC, {**DOC, "title": "B"}))
    with pytest.raises(PipelineError, match="2 rows, over the limit of 1"):
        questions_from_rows("shortdep_qa", [DOC, {**DOC, "title": "B"}], "rows")


def test_a_data_file_that_is_no_regular_file_is_refused_without_reading(tmp_path):
    path = tmp_path / "shortdep_qa.jsonl"
    os.mkfifo(path)
    assert "is a FIFO, a socket or a device, not a regular file" in refusal(DataSource(str(tmp_path)))
    path.unlink()
    path.symlink_to("/dev/zero")
    assert "is a FIFO, a socket or a device, not a regular file" in refusal(DataSource(str(tmp_path)))
