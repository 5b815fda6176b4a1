"""User-derived text in LooGLE's tables (the data's label, the task, the question types, the members'
labels) is escaped as model names are: shown literally, never markup (on 70baafc the data column of
`make leaderboard`'s ``loogle.md`` and the validation report's per-type table held the raw tag); its
CSV neutralises a cell a spreadsheet would run as a formula (on 803d062 written as it was)."""

from __future__ import annotations

import csv
import io
import json

from pipeline.loogle.generation.answering import RunSettings
from pipeline.reporting import loogle as loogle_board
from pipeline.results import loogle as loogle_lines
from studies.validation import loogle_report

TAG = "<img src=x onerror=alert(1)>"


def test_the_loogle_table_escapes_the_data_column(tmp_path):
    settings = RunSettings("shortdep_qa", TAG, "f" * 12, "tiny", 4096, 64, None).record()
    result = {"task": "shortdep_qa", "n_questions": 3, "metrics": {"bleu1": 0.25}, "unavailable": {},
              "predictions": "artifacts/loogle/p.jsonl"}  # fmt: skip
    model = {"spec": "tiny", "kind": "local", "weights_sha256": "0" * 64}
    path = tmp_path / "loogle.jsonl"
    path.write_text(json.dumps(loogle_lines.loogle_row("tiny", model, result, settings, 1.5, 1.0)) + "\n")
    board = loogle_board.files(path)["loogle.md"].decode()
    assert TAG not in board and r"\<img src=x onerror=alert(1)\>" in board
    assert loogle_board.table(path)[0]["data"] == TAG  # the CSV keeps the value itself


def test_the_validation_reports_loogle_tables_escape_types_and_labels():
    part = {"gain_bits_per_byte": 0.1, "n_counted": 1, "n_questions": 2}
    row = {"label": "m <b>1</b>", "loogle": {"by_type": [{"type": TAG, **part}]}}
    table = loogle_report.types_table([row])
    assert TAG not in table and "<b>" not in table
    assert r"\<img src=x onerror=alert(1)\> (bits/byte, n)" in table and r"m \<b\>1\</b\>" in table


def test_the_loogle_csv_neutralises_a_cell_a_spreadsheet_would_run(tmp_path):
    """loogle.csv wrote a model name or data label starting with = or @ as it is (a spreadsheet ran it);
    a negative metric (a BERTScore) stays a number."""
    settings = RunSettings("shortdep_qa", "@SUM(A1:A9)", "f" * 12, "tiny", 4096, 64, None).record()
    result = {"task": "shortdep_qa", "n_questions": 3, "metrics": {"bleu1": 0.25, "bertscore": -0.125},
              "unavailable": {}, "predictions": "artifacts/loogle/p.jsonl"}  # fmt: skip
    model = {"spec": "tiny", "kind": "local", "weights_sha256": "0" * 64}
    path = tmp_path / "loogle.jsonl"
    line = loogle_lines.loogle_row('=HYPERLINK("http://x")', model, result, settings, 1.5, 1.0)
    path.write_text(json.dumps(line) + "\n")
    (row,) = csv.DictReader(io.StringIO(loogle_board.files(path)["loogle.csv"].decode()))
    assert row["model"] == '\'=HYPERLINK("http://x")' and row["data"] == "'@SUM(A1:A9)"
    assert row["bertscore"] == "-0.1250" and row["bleu1"] == "0.2500"
