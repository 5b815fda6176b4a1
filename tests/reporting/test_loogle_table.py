"""User-derived text in LooGLE's tables (the data's label, the task, the question types, the members'
labels) is escaped as model names are: shown literally, never markup (on 70baafc the data column of
`make leaderboard`'s ``loogle.md`` and the validation report's per-type table held the raw tag)."""

from __future__ import annotations

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
