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


# ----------------------------------------------------------------------------------------------
# lm-eval: an unknown task name is refused before lm-eval's task index loads (17 s of a 18 s refusal)


def test_an_unknown_lm_eval_task_is_refused_before_the_task_index(tiny_artifact, monkeypatch):
    lm_eval_tasks = pytest.importorskip("lm_eval.tasks", reason="needs lm-eval: `make setup-lmeval`")
    from pipeline.lmeval.__main__ import run

    def index_loaded(*args, **kwargs):
        raise AssertionError("lm-eval's task index was loaded")

    monkeypatch.setattr(lm_eval_tasks.TaskManager, "__init__", index_loaded)
    with pytest.raises(
        PipelineError, match=r"^longppl_nosuch, hellaswagg: no such lm-eval task\. LongPPL tasks"
    ):
        run(
            [
                "--artifact",
                str(tiny_artifact),
                "--tasks",
                "longppl_nosuch,hellaswag",
                "hellaswagg",
                "--limit",
                "1",
            ]
        )


def test_known_lm_eval_names_are_left_to_lm_eval(tiny_artifact, tmp_path):
    pytest.importorskip("lm_eval", reason="needs lm-eval: `make setup-lmeval`")
    from pipeline.lmeval.names import unknown_tasks_in
    from pipeline.lmeval.tasks import task_directory, task_name

    ours = task_name(str(tiny_artifact))
    directory = task_directory([str(tiny_artifact)])
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "t.yaml").write_text("task: my_task\n")
    known = [ours, "longppl", "hellaswag", "arc_easy", "mmlu_*", "my_task", str(tmp_path / "t.yaml")]
    args = ["run", "--tasks", ",".join(known), "--include_path", str(tmp_path / "mine"), "--limit", "1"]
    assert unknown_tasks_in(args, directory) == []
    assert unknown_tasks_in(["--tasks", "arc_eas", "arc_easy_x"], directory) == ["arc_eas", "arc_easy_x"]
    assert unknown_tasks_in(["--tasks=my_task"], directory) == ["my_task"]  # without its --include_path
    assert unknown_tasks_in(["--config", "c.yaml", "--tasks", "nosuch"], directory) == []
    assert unknown_tasks_in(["validate", "--tasks", "nosuch"], directory) == []
