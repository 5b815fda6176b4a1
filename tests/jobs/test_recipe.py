"""The one recipe (``pipeline.jobs.recipe``): a job that declares no model runs through it, the folder a
job writes whole is locked for the run, the offline rule is the project's one and is put back after
the job, and the commands of stage 1, fine-tuning and the import go through ``api.run``."""

from __future__ import annotations

import ast
import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from pipeline.artifact import lock
from pipeline.errors import PipelineError
from pipeline.jobs import recipe
from pipeline.jobs.recipe import JobResult
from tests.support import ROOT


@dataclasses.dataclass
class NoModelJob:
    """A job that loads no model: what it saw while it ran."""

    folder: Path | None = None
    model = None
    compute = None
    results = None
    results_setting = "results"
    results_kind = None
    folder_use = ("test run", "pass folder=<other>")
    seen: dict[str, Any] = dataclasses.field(default_factory=dict)

    def outputs(self) -> list:
        return []

    def needs_hub(self) -> bool:
        return False

    def open(self) -> str:
        self.seen["offline"] = os.environ.get("HF_HUB_OFFLINE")
        return "inputs"

    def append(self, path: Path, row: dict) -> None:
        raise AssertionError("no results lines")

    def measure(self, lm, scorer, inputs, record, started) -> JobResult:
        self.seen["measure"] = (lm, scorer, inputs)
        if self.folder is not None:
            with pytest.raises(PipelineError, match=r"another test run is writing .*: pid \d+ on "):
                lock.exclusive(self.folder, "test run").__enter__()
        return JobResult("done")


@pytest.mark.parametrize("before", [None, "0"])
def test_a_job_without_a_model_and_the_offline_rule_put_back(monkeypatch, before):
    if before is None:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", before)
    job = NoModelJob()
    assert recipe.run(job).value == "done"
    assert job.seen == {"offline": before or "1", "measure": (None, None, "inputs")}
    assert os.environ.get("HF_HUB_OFFLINE") == before


def test_the_folder_a_job_writes_is_locked_while_it_runs(tmp_path):
    job = NoModelJob(folder=tmp_path / "artifact")
    recipe.run(job)
    assert "measure" in job.seen
    with lock.exclusive(tmp_path / "artifact", "test run"):  # released after the job
        pass


def test_one_offline_rule_and_the_commands_go_through_api_run():
    """One ``offline_unless`` in the package (the recipe's), and every command calls ``api.run``: a job
    of its own, or its work without a model (``api.run_work``: a ``WorkJob``). Not lm-eval's command
    line (lm-eval's own, whose requests run through ``api.run`` as a ``TextsJob``) nor the LooGLE extra's
    installer, which run no job."""
    defined = [
        path.relative_to(ROOT).as_posix()
        for path in sorted((ROOT / "pipeline").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and node.name == "offline_unless"
    ]
    assert defined == ["pipeline/jobs/recipe.py"]
    commands = sorted((ROOT / "pipeline" / "commands").glob("*.py"))
    others = {"__init__", "shell", "lm_eval", "setup_loogle"}
    assert len(commands) - len(others) == 17
    for path in commands:
        if path.stem in others:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls = {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
        assert calls & {"api.run", "run_work"}, path.stem
