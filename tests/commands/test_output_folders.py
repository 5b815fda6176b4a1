"""Output folders (predictions_dir=, plot_dir=, output_dir= of make keytokens and make finetune, make
publish's out_dir=) go through the same check as files, before any model loads: never an artifact's
or a model's folder, a file, procfs or sysfs; an artifact's folder of make keytokens and a run's
folder of make finetune are new, empty or their own kind, never a folder of the user's files. On
803d062 these wrote into whatever folder was named (or ended in a traceback after the work)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from pipeline.commands import finetune as finetune_command
from pipeline.commands import forgetting_curve as curve_command
from pipeline.commands import ladder as ladder_command
from pipeline.commands import loogle as loogle_command
from pipeline.commands import publish as publish_command
from pipeline.errors import PipelineError
from pipeline.models.loading import ModelChoice
from tests.support import (
    STAGE1_TEXTS,
    compose_config,
    compose_forgetting,
    compose_keytokens,
    keytokens_overrides,
    loogle_run_overrides,
    run_keytokens,
)

INSIDE = r"(an artifact's folder \(key-token tables and their manifest\)|a model's folder \(its config.json)"


@pytest.fixture
def no_load(monkeypatch):
    monkeypatch.setattr(ModelChoice, "load", lambda *a, **k: pytest.fail("the model loaded"))


@pytest.fixture
def places(tiny_artifact, other_model_dir, tmp_path):
    """An artifact's and a model's folder (copies), a regular file, a folder of the user's files."""
    artifact = Path(shutil.copytree(tiny_artifact, tmp_path / "artifact"))
    model = Path(shutil.copytree(other_model_dir, tmp_path / "model"))
    (tmp_path / "file").write_text("mine\n")
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine\n")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    yield {"artifact": artifact, "model": model, "file": tmp_path / "file", "user": tmp_path / "user"}
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p in before} == before
    assert not (artifact / "predictions").exists() and not (model / "plots").exists()


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text(
        "".join(json.dumps({"id": f"doc-{i}", "text": t}) + "\n" for i, t in enumerate(STAGE1_TEXTS))
    )
    return path


def test_predictions_and_plot_folders(places, other_model_dir, tmp_path, no_load):
    """make loogle's predictions_dir, make ladder's and make forgetting-curve's plot_dir."""
    cases = {
        places["artifact"] / "predictions": rf": {re.escape(str(places['artifact']))} is {INSIDE}",
        places["model"] / "plots": rf": {re.escape(str(places['model']))} is {INSIDE}",
        places["model"]: rf" is {INSIDE}",
        places["file"]: r" is a file, not a folder: pass a folder",
        Path("/proc/self"): r": /proc/\d+ is in procfs \(/proc\), not a place for files",
    }
    model = ["model=local", f"model.spec={other_model_dir}", "device=cpu"]
    for folder, said in cases.items():
        where = rf"^predictions_dir={re.escape(str(folder))}{said}"
        with pytest.raises(PipelineError, match=where):
            loogle_command.run(compose_config("loogle", loogle_run_overrides(
                other_model_dir, folder, tmp_path / "l.jsonl", limit=1, new_tokens=2)))  # fmt: skip
        results = [f"results={tmp_path / 'r.jsonl'}", f"plot_dir={folder}"]
        with pytest.raises(PipelineError, match=rf"^plot_dir={re.escape(str(folder))}{said}"):
            ladder_command.run(compose_config("ladder", [*model, *results]))
        with pytest.raises(PipelineError, match=rf"^plot_dir={re.escape(str(folder))}{said}"):
            curve_command.run(compose_forgetting([*model, *results]))


def test_keytokens_writes_an_artifact_only_where_one_may_go(
    places, tiny_model_dir, corpus, tmp_path, no_load
):
    """output_dir= inside a model's folder or an artifact's, and name= a folder of the user's files, are
    refused before the evaluator loads; an artifact's folder is its own kind (a finished one is left
    as it is, a killed run's resumed: tests/keytokens)."""
    model, artifact = (re.escape(str(places[k])) for k in ("model", "artifact"))
    for out, name, said in [
        (places["model"], "new", rf": {model} is {INSIDE}"),
        (places["artifact"], "new", rf": {artifact} is {INSIDE}"),
        (tmp_path, "user", r" is a folder that holds no artifact \(notes.txt\): `make keytokens`"),
        (tmp_path, "file", r" is a file, not a folder"),
    ]:
        cfg = compose_keytokens([*keytokens_overrides(tiny_model_dir, corpus, out), f"name={name}"])
        with pytest.raises(PipelineError, match=rf"^output_dir={re.escape(str(out / name))}{said}"):
            run_keytokens(cfg)


def test_finetune_writes_a_run_only_where_one_may_go(places, other_model_dir, corpus, tmp_path, no_load):
    model, artifact = (re.escape(str(places[k])) for k in ("model", "artifact"))
    for out, name, said in [
        (places["artifact"], "run", rf": {artifact} is {INSIDE}"),
        (places["model"], "run", rf": {model} is {INSIDE}"),
        (tmp_path, "user", r" is a folder that holds no fine-tuning run \(no run.json of one\)"),
    ]:
        cfg = compose_config("finetune", ["model=local", f"model.spec={other_model_dir}", "corpus=local",
                                          f"corpus.path={corpus}", f"output_dir={out}", f"name={name}",
                                          "device=cpu", "max_length=80", "K=16", "d=8"])  # fmt: skip
        with pytest.raises(PipelineError, match=rf"^output_dir={re.escape(str(out / name))}{said}"):
            finetune_command.run(cfg)


def test_publish_refuses_the_kernels_folders_and_a_models(places, tiny_artifact):
    for out, said in [
        (Path("/proc/self/up"), r": /proc/\d+ is in procfs"),
        (places["model"] / "up", rf": {re.escape(str(places['model']))} is {INSIDE}"),
    ]:
        cfg = compose_config(
            "publish", [f"artifact={tiny_artifact}", "repo=org/keytokens", "dry_run=true", f"out_dir={out}"]
        )
        with pytest.raises(PipelineError, match=rf"^out_dir={re.escape(str(out))}{said}"):
            publish_command.run(cfg)


def test_a_keytokens_run_into_its_own_artifact_folder_still_finishes(tiny_model_dir, corpus, tmp_path):
    """The artifact's folder of an earlier run with the same settings is its own: left untouched."""
    first = run_keytokens(compose_keytokens(keytokens_overrides(tiny_model_dir, corpus, tmp_path)))
    again = run_keytokens(compose_keytokens(keytokens_overrides(tiny_model_dir, corpus, tmp_path)))
    assert again["fingerprint"] == first["fingerprint"]


def test_a_refresh_records_only_over_a_record_and_works_only_where_runs_may_go(
    places, tiny_artifact, other_model_dir, monkeypatch
):
    """record=true replaces its record whole: never an artifact's manifest or a file of other lines; its
    work_dir is checked like any output folder, before any model is pinned or scored."""
    from pipeline.commands import leaderboard_refresh as refresh_command
    from pipeline.sharing import refresh

    monkeypatch.setattr(refresh, "score_all", lambda *a: pytest.fail("the models were scored"))
    artifact, notes = places["artifact"], places["user"] / "notes.txt"
    models = f"[{{name: tiny, spec: '{other_model_dir}', revision: null}}]"
    base = [f"artifact={tiny_artifact}", f"models={models}", "fingerprint=abc", "record=true"]
    for recorded, work, said in [
        (artifact / "manifest.json", places["user"], rf"^recorded=.*manifest.json: .* is {INSIDE}"),
        (notes, places["user"], r"^recorded=.*notes.txt holds line 1, which is no scores line"),
        (places["user"] / "r.jsonl", places["model"], rf"^work_dir=.* is {INSIDE}"),
        (places["user"] / "r.jsonl", Path("/proc/self"), r"^work_dir=/proc/self: /proc/\d+ is in procfs"),
    ]:
        cfg = compose_config("leaderboard_refresh", [*base, f"recorded={recorded}", f"work_dir={work}"])
        with pytest.raises(PipelineError, match=said):
            refresh_command.run(cfg)
