"""Where results go is checked as it will be written: each parent resolved (a symlink on the way that
leads nowhere, or loops), a file or folder of the kernel's (procfs, sysfs) refused, before any model
loads, in one line; and the write refuses what the check refuses, so it never follows such a path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.commands import loogle as loogle_command
from pipeline.commands import score as score_command
from pipeline.errors import PipelineError
from pipeline.outputs import Checked, Output, check
from pipeline.results import lines
from tests.support import compose_config

BROKEN = {  # a results path under a symlink that leads nowhere or loops: what the check names
    "under a symlink to nowhere": ("link/scores.jsonl", r"link is a symlink to .*gone, which does not exist"),
    "deep under a symlink to nowhere": (
        "link/a/b/scores.jsonl",
        r"link is a symlink to .*gone, which does not",
    ),
    "under a symlink loop": ("loop/scores.jsonl", r"loop is a symlink loop"),
}
KERNEL = {  # files and folders of the kernel's own filesystems (root may "write" them)
    "/proc/self/status": r"/proc/\d+/status is in procfs \(/proc\), not a place for files",
    "/sys/kernel/scores.jsonl": r"/sys/kernel is in sysfs \(/sys\), not a place for files",
}


def results_output(path: str | Path) -> Checked:
    """``results=<path>`` checked as every command checks it (any results lines)."""
    return check(Output("results", Path(path), lines.JSON_LINES))


def broken(tmp_path: Path, case: str) -> Path:
    (tmp_path / "link").symlink_to(tmp_path / "gone", target_is_directory=True)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    return tmp_path / BROKEN[case][0]


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_results_path_under_a_broken_symlink_is_refused_by_the_check(tmp_path, case):
    """On 70baafc these passed the check (only the path itself was looked at), and the run's result was
    lost after the work, with a FileExistsError from mkdir."""
    path = broken(tmp_path, case)
    with pytest.raises(PipelineError, match=rf"^results={re.escape(str(path))}: .*{BROKEN[case][1]}"):
        results_output(path)


@pytest.mark.parametrize("given", list(KERNEL))
def test_a_kernel_file_or_folder_is_refused_by_the_check(given):
    """On 70baafc results=/proc/self/status passed the check (root may write any mode), and the work ran."""
    if not Path(given).parent.is_dir():
        pytest.skip(f"{Path(given).parent} is not mounted here")
    with pytest.raises(PipelineError, match=rf"^results={given}: {KERNEL[given]}: pass a path on a disk$"):
        results_output(given)


@pytest.mark.parametrize("case", [*BROKEN, "/proc/self/status"])
def test_the_write_refuses_what_the_check_refuses(tmp_path, case):
    """``append`` given a path runs the check too: it never makes the folder a dangling symlink points
    at, nor writes into /proc (on 70baafc: FileExistsError from mkdir, or an OSError, after the work)."""
    path = Path(case) if case.startswith("/") else broken(tmp_path, case)
    before = Path("/proc/self/status").read_bytes() if case.startswith("/") else None
    with pytest.raises(PipelineError, match=rf"^results={re.escape(str(path))}(: | is ).*: pass a path"):
        lines.append(path, {"a": 1})
    assert not (tmp_path / "gone").exists()
    assert before is None or b'"a": 1' not in Path("/proc/self/status").read_bytes()


def test_a_regular_file_and_a_new_folder_are_still_written(tmp_path):
    target = tmp_path / "real.jsonl"
    target.write_text("")
    (tmp_path / "link.jsonl").symlink_to(target)
    (tmp_path / "folder").symlink_to(tmp_path / "made", target_is_directory=True)
    (tmp_path / "made").mkdir()
    for path in (tmp_path / "link.jsonl", tmp_path / "folder" / "new" / "scores.jsonl"):
        assert results_output(path).path == path
        lines.append(path, {"a": 1})
        assert path.read_text() == '{"a": 1}\n'


def test_make_score_and_make_loogle_refuse_them_before_the_model_loads(tmp_path):
    """The model does not exist: a command that got past the output checks would fail on it instead."""
    no_model = ["model=local", f"model.spec={tmp_path / 'no-model'}", "device=cpu"]
    link = broken(tmp_path, "under a symlink to nowhere").parent
    for results in (link / "scores.jsonl", "/proc/self/status"):
        cfg = compose_config("score", [*no_model, f"results={results}"])
        with pytest.raises(
            PipelineError, match=rf"^results={re.escape(str(results))}: .* (does not exist|procfs)"
        ):
            score_command.run(cfg)
    predictions = link / "predictions"
    cfg = compose_config(
        "loogle", [*no_model, f"predictions_dir={predictions}", f"results={tmp_path / 'l.jsonl'}"]
    )
    with pytest.raises(
        PipelineError, match=rf"^predictions_dir={re.escape(str(predictions))}: {link} is a symlink"
    ):
        loogle_command.run(cfg)
    assert not (tmp_path / "gone").exists()
