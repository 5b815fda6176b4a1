"""The API's other paths go through the same check as a command's (results_file and ScoreJob(results=)
in tests/results/test_results_outputs.py): save_key_tokens' directory and the drop-in's save_path,
before any model loads. On 803d062 save_key_tokens wrote its tables into a model's folder, and
compute_longppl wrote its spans over an artifact's manifest."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from pipeline import api
from pipeline.api.dropin import compute_longppl
from pipeline.artifact.reader import load_artifact
from pipeline.errors import PipelineError


def test_save_key_tokens_writes_no_artifact_into_a_models_or_an_artifacts_folder(
    tiny_artifact, other_model_dir, tmp_path
):
    model = Path(shutil.copytree(other_model_dir, tmp_path / "model"))
    artifact = Path(shutil.copytree(tiny_artifact, tmp_path / "artifact"))
    found = load_artifact(tiny_artifact)
    for folder in (model / "keytokens", artifact / "copy", model):
        with pytest.raises(
            PipelineError, match=rf"^directory={re.escape(str(folder))}(: .*)? is an? (model|artifact)"
        ):
            api.save_key_tokens(found, folder)
    assert sorted(p.name for p in model.iterdir()) == sorted(p.name for p in other_model_dir.iterdir())
    assert not (artifact / "copy").exists()
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    with pytest.raises(
        PipelineError, match=r"^directory=.*/user is a folder that holds no artifact \(notes.txt\)"
    ):
        api.save_key_tokens(found, tmp_path / "user")


def test_the_drop_in_writes_its_spans_only_over_a_span_file(tiny_artifact, tmp_path):
    """save_path with an evaluator is an output: checked before either model loads (the models here are
    names of nothing), and only a key-span file (or an empty one) is written over."""
    artifact = Path(shutil.copytree(tiny_artifact, tmp_path / "artifact"))
    manifest = (artifact / "manifest.json").read_bytes()
    with pytest.raises(PipelineError, match=r"^save_path=.*manifest.json: .* is an artifact's folder"):
        compute_longppl("text", "no-model", "no-evaluator", save_path=str(artifact / "manifest.json"))
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    with pytest.raises(PipelineError, match=r"^save_path=.*notes.txt holds no key-span file"):
        compute_longppl("text", "no-model", "no-evaluator", save_path=str(notes))
    spans = tmp_path / "spans.txt"
    spans.write_text("[0, 4];[6, 9]")
    with pytest.raises(PipelineError, match=r"no-model"):  # past the check: the model is what fails
        compute_longppl("text", "no-model", "no-evaluator", save_path=str(spans))
    assert (artifact / "manifest.json").read_bytes() == manifest and notes.read_text() == "my notes\n"
