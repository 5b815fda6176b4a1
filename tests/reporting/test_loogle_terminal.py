"""Text from LooGLE's data (titles, evidence, task names) and from the command line, as the LooGLE
commands print it: control characters escaped, never sent raw to the terminal (on 70baafc
`make loogle-evidence` printed a title's and an evidence string's ANSI and OSC sequences as they were:
a window title, a screen clear, an OSC 52 clipboard write)."""

from __future__ import annotations

import json
import re

from pipeline.commands.loogle_evidence import run
from pipeline.formats import terminal_text
from pipeline.reporting import loogle as loogle_board
from pipeline.reporting import loogle_evidence
from tests.support import TEXT_A, compose_config, one_error, qa_pairs, run_cli

RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # a line break is the table's own
TITLE = "\x1b]0;pwned\x07Alpha\x1b[2J\x9b31m\u202e"
EVIDENCE = "\x1b]52;c;aGVsbG8=\x07 copied to the clipboard, nowhere in the text"


def test_make_loogle_evidence_prints_titles_and_evidence_escaped(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    row = {"title": TITLE, "input": TEXT_A, "output": None}
    row["qa_pairs"] = qa_pairs(("What?", "a museum", [EVIDENCE], None))
    (folder / "shortdep_qa.jsonl").write_text(json.dumps(row) + "\n")
    out = tmp_path / "e.json"
    result = run(compose_config("loogle_evidence", [f"data={folder}", "task=shortdep_qa", f"out={out}"]))
    printed = loogle_evidence.summary(result, out)
    assert not RAW.search(printed), printed
    assert r"\x1b]0;pwned\x07Alpha\x1b[2J\x9b31m\u202e#0 [0]  \x1b]52;c;aGVsbG8=\x07 copied" in printed


def test_loogle_summaries_escape_the_task_and_the_data_label():
    result = {"task": "shortdep_qa\x1b[2J", "n_questions": 1, "format": "data \x1b]52;c;eA==\x07",
              "metrics": {"bleu1": 0.5}, "unavailable": {}, "appended_to": "r\x1b[1m.jsonl"}  # fmt: skip
    assert not RAW.search(loogle_board.metrics_summary(result))
    assert terminal_text("plain — text, é") == "plain — text, é"  # printable text is unchanged


def test_an_error_line_shows_the_command_lines_control_characters_escaped():
    done = run_cli("pipeline.commands.loogle_evidence", "data=/nowhere/\x1b[2Jdir")
    line = one_error(done)
    assert not RAW.search(done.stderr) and r"\x1b[2J" in line
