"""Results files: a path that cannot take a line (a folder, a FIFO, a symlink to nowhere, a path under a
file) is refused before the model runs; a full disk never leaves part of a line; a line cut short is
named, skipped and never glued to the next, and never costs the others; readers refuse what writers
refuse (NaN, 1e308, wrong types, deep nesting, huge lines), each in one line naming the file, the line
and the field, whatever its bytes."""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipeline import api
from pipeline.commands import leaderboard as leaderboard_command
from pipeline.errors import PipelineError
from pipeline.outputs import Checked, Output, check
from pipeline.reporting import leaderboard
from pipeline.results import lines
from pipeline.results.score import read_lines, read_scores
from tests.support import (
    ROOT,
    base_rows,
    cli,
    compose_config,
    error_lines,
    genuine_line,
    job,
    messages,
    score,
    write_lines,
)

# The score command with a disk that holds `quota` more bytes of the results file: one short write,
# then ENOSPC (what a full filesystem does), injected into os.write for that file only.
FULL_DISK = textwrap.dedent(
    """
    import errno, os, sys
    results, quota = sys.argv[1], [int(sys.argv[2])]
    real_write = os.write

    def write(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}") != results:
            return real_write(fd, data)
        if quota[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = real_write(fd, bytes(data[: quota[0]]))
        quota[0] -= written
        return written

    os.write = write
    sys.argv = ["pipeline.commands.score", *sys.argv[3:]]
    from pipeline.commands.score import main
    main()
    """
)


def results_output(path: str | Path) -> Checked:
    """``results=<path>`` checked as every command checks it (any results lines)."""
    return check(Output("results", Path(path), lines.JSON_LINES))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to inject the write")
def test_full_disk_leaves_whole_lines(other_model_dir, tiny_artifact, tmp_path):
    results = tmp_path / "scores.jsonl"
    score(other_model_dir, tiny_artifact, tmp_path)
    before = results.read_bytes()
    args = ["model=local", f"model.spec={other_model_dir}", f"artifact={tiny_artifact}", f"results={results}"]
    args += ["dtype=float64", "device=cpu", "progress=false", f"hydra.run.dir={tmp_path / 'logs'}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(results), "700", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "appended to" not in done.stdout
    assert [line for line in done.stderr.splitlines() if "error" in line] == [
        f"error: could not append the result to {results} (No space left on device): the file is as it "
        "was; free space and run again"
    ]
    assert results.read_bytes() == before  # the 700 bytes written were taken back
    score(other_model_dir, tiny_artifact, tmp_path)  # space freed: the next append is whole
    assert [number for number, _, _ in read_lines(results)] == [1, 2]
    assert results.read_bytes().startswith(before) and results.read_bytes().endswith(b"}\n")


def test_a_short_write_goes_on_with_the_rest(tmp_path, monkeypatch):
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data[:5])))
    lines.append(tmp_path / "r.jsonl", {"a": "x" * 100})
    monkeypatch.undo()
    assert json.loads((tmp_path / "r.jsonl").read_text()) == {"a": "x" * 100}


def test_a_line_cut_short_earlier_is_skipped_with_a_note_and_never_glued(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\n{"a": 2, "b"')  # an older writer's torn line, no newline
    read = lines.read(path, lines_schema(), what="scores", kind="result", hint="")
    assert [obj["a"] for _, obj, _ in read] == [1]
    assert "line 2 was cut short" in capsys.readouterr().err
    lines.append(path, {"a": 3})
    assert path.read_text().splitlines() == ['{"a": 1}', '{"a": 2, "b"', '{"a": 3}']
    read = lines.read(path, lines_schema(), what="scores", kind="result", hint="")
    assert [obj["a"] for _, obj, _ in read] == [1, 3]  # the torn line costs no other


def test_a_line_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": "\xff"}\n{"a": "\xe2\x80\xa8"}\n')
    with pytest.raises(
        PipelineError, match=r"line 2 is not a valid result \(not UTF-8: byte 0xff at column 8\)"
    ):
        lines.read(path, lines_schema(), what="scores", kind="result", hint="")
    path.write_bytes(b'{"a": 1}\n{"a": "\xe2\x80\xa8"}\n')  # U+2028 inside a string: one line, not two
    assert [obj["a"] for _, obj, _ in lines.read(path, lines_schema(), what="", kind="", hint="")] == [
        1,
        "\u2028",
    ]


def lines_schema():
    from pydantic import BaseModel, ConfigDict

    class Any_(BaseModel):
        model_config = ConfigDict(extra="allow")

    return Any_


@pytest.mark.parametrize("kind", ["dangling", "loop", "fifo", "socket"])
def test_results_that_cannot_take_a_line_are_refused_before_scoring(kind, tmp_path):
    """results= a symlink to nowhere, a symlink loop, a FIFO or a socket: refused by the check every
    command runs before its model loads (it failed after scoring, the FIFO blamed on free space)."""
    path = tmp_path / "scores.jsonl"
    if kind == "dangling":
        path.symlink_to(tmp_path / "gone" / "scores.jsonl")
    elif kind == "loop":
        path.symlink_to(path)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
    said = {
        "dangling": "is a symlink to",
        "loop": "is a symlink loop",
        "fifo": "is a FIFO",
        "socket": "is a socket",
    }
    with pytest.raises(
        PipelineError, match=f"results={path} {said[kind]}.*: pass the path of a regular file"
    ):
        results_output(path)


def test_a_symlink_to_a_regular_file_is_still_written(tmp_path):
    target = tmp_path / "real.jsonl"
    target.write_text("")
    (tmp_path / "link.jsonl").symlink_to(target)
    assert results_output(tmp_path / "link.jsonl").path == tmp_path / "link.jsonl"


def test_results_that_cannot_be_written_fail_before_the_model_runs(other_model_dir, tiny_artifact, tmp_path):
    (tmp_path / "file").write_text("")
    done = cli(
        "pipeline.commands.score", "--multirun", "model=local", f"model.spec={other_model_dir}",
        f"artifact={tiny_artifact}", f"results={tmp_path},{tmp_path / 'file' / 'scores.jsonl'}", "device=cpu",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )  # fmt: skip
    found = sorted(line.split("] ", 1)[1] for line in error_lines(done.stderr))
    under_a_file = f"{tmp_path / 'file'} is a file, not a folder: pass a path in a folder"
    assert found == sorted([
        f"results={tmp_path / 'file' / 'scores.jsonl'}: {under_a_file}",
        f"results={tmp_path} is a folder: pass a file in it, e.g. {tmp_path / 'results.jsonl'}",
    ])  # fmt: skip
    assert "PPL" not in done.stdout  # nothing was scored
    with pytest.raises(PipelineError, match=r"results_file=.* is a folder"):
        api.score(None, None, tiny_artifact, results_file=tmp_path)


def test_a_torn_line_never_costs_the_others(tmp_path, capsys):
    """A write killed mid-line leaves a line cut short; the next append starts a new line, and every
    reader skips the torn one with a note: `make leaderboard` shows all the others."""
    rows = base_rows()
    path = write_lines(tmp_path / "scores.jsonl", rows[:2])
    with path.open("a") as f:
        f.write(json.dumps(rows[2])[:150])  # killed after 150 bytes
    lines.append(path, rows[2])
    paths = leaderboard_command.run(
        compose_config("leaderboard", [f"results={path}", f"out_dir={tmp_path / 'out'}"])
    )
    assert paths["leaderboard.csv"].read_text().count("\n") == 4  # the header and three entries
    assert (
        "line 3 was cut short (a write that was killed, or a full disk): skipped" in capsys.readouterr().err
    )


def test_results_files_with_bad_bytes(tmp_path):
    utf8, torn = tmp_path / "utf8.jsonl", tmp_path / "torn.jsonl"
    utf8.write_bytes(b'{"model_name": "m\xff"}\n')
    torn.write_bytes(b'{"model_name": "m", "corpus": {"ppl"')  # a write cut short
    done = cli(
        "pipeline.commands.leaderboard", "--multirun", f"results={utf8},{torn}", f"out_dir={tmp_path / 'o'}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )  # fmt: skip
    found = messages(done.stderr)
    assert job(found, f"results={utf8}") == (
        f"{utf8} line 1 is not a valid result (not UTF-8: byte 0xff at column 18): fix or delete that line"
    )
    assert job(found, f"results={torn}").startswith(f"no scores in {torn} (its only line, 1, was cut short)")


def identity_values(line: dict) -> dict:
    return line["artifact"]["identity"]["documents"]["govreport-00"]["values"]


BAD_LINES = {
    "nan-in-a-document": (
        lambda r: r["documents"][1].update(ppl=math.nan),
        r"`documents\[1\]\.ppl` is nan, not a finite number",
    ),
    "summary-of-wrong-type": (
        lambda r: identity_values(r)["lsd"].update(sum="x"),
        r"`artifact\.identity\.documents\.govreport-00\.values\.lsd\.sum` is str 'x', not a finite number",
    ),
    "summaries-as-a-list": (
        lambda r: r["artifact"]["identity"]["documents"]["govreport-00"].update(values=[1]),
        r"`artifact\.identity\.documents\.govreport-00\.values` is list '\[1\]', not an object",
    ),
    "discrete-hash-a-number": (
        lambda r: r["artifact"]["identity"].update(discrete=5),
        r"`artifact\.identity\.discrete` is int '5', not a string",
    ),
    "1e308-perplexity": (
        lambda r: r["corpus"].update(ppl=1e308),
        r"`corpus\.ppl` is 1e\+308, beyond \+-1e\+300",
    ),
    "1e308-summary": (
        lambda r: identity_values(r)["soft_weight"].update(max=1e308),
        r"`artifact\.identity\.documents\.govreport-00\.values\.soft_weight\.max` is 1e\+308",
    ),
}


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_the_leaderboard_refuses_a_bad_line_in_one_line(tmp_path, case):
    """On f0729ca: a NaN, a 1e308 summary and a hash of the wrong type were read as good, a summary of
    the wrong type and a 1e308 perplexity gave tracebacks in the leaderboard."""
    edit, message = BAD_LINES[case]
    bad = genuine_line()
    edit(bad)
    path = tmp_path / "scores.jsonl"
    path.write_text(json.dumps(genuine_line()) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(
        PipelineError, match=rf"^{re.escape(str(path))} line 2 is not a valid result \(.*{message}"
    ):
        leaderboard.render(read_scores(path), tmp_path / "out")


def test_a_deeply_nested_or_huge_line_is_refused_in_one_line(tmp_path):
    """JSON nested 100,000 deep (on f0729ca: RecursionError) and a line over the size limit (on
    f0729ca: read whole, 50 MB took 21.6 GB) are one error each, naming the line."""
    good = json.dumps(genuine_line())
    path = tmp_path / "scores.jsonl"
    path.write_text(good + "\n" + good[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(PipelineError, match=rf"{re.escape(str(path))} line 2 .*nested deeper than 32 levels"):
        read_scores(path)
    path.write_text(good + "\n" + good[:-1] + ', "x": [' + "[" * 40 + "]" * 40 + "]}\n")
    with pytest.raises(PipelineError, match=r"line 2 .*`x\[0\]\[0\].*` is nested deeper than 32 levels"):
        read_scores(path)
    path.write_text(good + "\n" + good[:-1] + ', "x": "' + "a" * (lines.MAX_LINE_BYTES + 1) + '"}\n')
    with pytest.raises(PipelineError, match=rf"{re.escape(str(path))} line 2 is longer than 16777216 bytes"):
        read_scores(path)


def test_writers_refuse_what_readers_refuse(tmp_path):
    line = genuine_line()
    line["corpus"]["ppl"] = 1e308
    with pytest.raises(
        PipelineError, match=r"`corpus\.ppl` is 1e\+308, beyond \+-1e\+300.*nothing was written"
    ):
        lines.append(tmp_path / "scores.jsonl", line)
    assert not (tmp_path / "scores.jsonl").exists()


def test_lm_eval_results_are_read_with_the_same_refusals(tmp_path):
    """An lm-eval results file's LongPPL task with an identity record of the wrong type or a 1e308
    value (on f0729ca: read as good, then a traceback on the board) is one error naming the file,
    the task and the field."""
    from pipeline.results.lmeval import read_lmeval_results

    task = "longppl_x"
    record = {"name": "x", "contents": "c" * 64, "identity": {"discrete": "d" * 64, "documents": []}}
    data = {
        "results": {task: {"ppl,none": 12.5, "longppl,none": 6.5}},
        "configs": {task: {"metadata": {"longppl_fingerprint": "f" * 64, "longppl_artifact_record": record}}},
        "config": {"longppl_model_name": "m"},
        "n-samples": {task: {"original": 2, "effective": 2}},
    }
    path = tmp_path / "results_x.json"
    path.write_text(json.dumps(data))
    with pytest.raises(
        PipelineError,
        match=rf"{re.escape(str(path))}: task {task}: `longppl_artifact_record\.identity\.documents` is list",
    ):
        read_lmeval_results(path)
    record["identity"]["documents"] = {}
    data["results"][task]["longppl,none"] = 1e308
    path.write_text(json.dumps(data))
    with pytest.raises(PipelineError, match=rf"task {task}: `results\.{task}\.longppl,none` is 1e\+308"):
        read_lmeval_results(path)
