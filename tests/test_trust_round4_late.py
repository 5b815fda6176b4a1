"""The fourth red team's "checked too late" cases (issue 43, points 2, 3, 6, 8): each is refused in
one line before any slow work (one ``error:`` line and exit status 2 on the command line, one
PipelineError in the API), or recorded where it changes a number."""

from __future__ import annotations

import os
import socket

import pytest

from pipeline.errors import PipelineError
from pipeline.results import lines


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
        lines.check_writable(path)


def test_a_symlink_to_a_regular_file_is_still_written(tmp_path):
    target = tmp_path / "real.jsonl"
    target.write_text("")
    (tmp_path / "link.jsonl").symlink_to(target)
    assert lines.check_writable(tmp_path / "link.jsonl") == tmp_path / "link.jsonl"
