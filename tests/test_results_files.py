"""Results files under failure: a full disk never leaves part of a line, a line cut short by an older
writer is named and never glued to the next, and a reader names the line whatever its bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from pipeline.errors import PipelineError
from pipeline.results import lines
from pipeline.results.scores import read_lines
from tests.conftest import ROOT
from tests.test_score import score

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
