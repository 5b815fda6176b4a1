"""`make score` on a sharded artifact: the same results as on its one-file form (the same artifact, the
same numbers), from a folder and from a Hub dataset; a missing shard is refused, naming it, before any
model loads."""

from __future__ import annotations

import shutil

import pytest

from pipeline.errors import PipelineError
from tests.support import score


def test_score_reads_a_sharded_artifact_as_its_one_file_form(
    sharded_artifact, tiny_artifact, other_model_dir, tmp_path, monkeypatch
):
    original = score(other_model_dir, tiny_artifact, tmp_path)
    sharded = score(other_model_dir, sharded_artifact, tmp_path)
    assert sharded["corpus"] == original["corpus"] and sharded["documents"] == original["documents"]
    for key in ("fingerprint", "contents", "identity"):
        assert sharded["artifact"][key] == original["artifact"][key], key
    commit = "0123456789abcdef0123456789abcdef01234567"  # the same shards from a Hub dataset (its cache)
    repo = tmp_path / "hub" / "datasets--org--sharded"
    shutil.copytree(sharded_artifact, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    hub = score(other_model_dir, "hf://datasets/org/sharded", tmp_path)
    assert hub["corpus"] == original["corpus"] and hub["artifact"]["source"]["revision"] == commit
    assert hub["artifact"]["identity"] == original["artifact"]["identity"]


def test_a_missing_shard_is_refused_before_the_model_loads(sharded_artifact, other_model_dir, tmp_path, spy):
    root = shutil.copytree(sharded_artifact, tmp_path / "a")
    (root / "spans-00002-of-00003.parquet").unlink()
    with pytest.raises(
        PipelineError, match=r"is missing spans-00002-of-00003\.parquet \(shard 3 of 3 of its spans table\)"
    ):
        score(other_model_dir, root, tmp_path)
    assert spy["loads"] == [] and not (tmp_path / "scores.jsonl").exists()
