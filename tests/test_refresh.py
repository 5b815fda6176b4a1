"""Leaderboard refresh: passes on recorded results, fails naming model and metric when one is altered."""

from __future__ import annotations

import json

import pytest

from pipeline.artifacts import load_artifact
from pipeline.errors import PipelineError
from pipeline.reporting import refresh
from tests.conftest import compose_config


def refresh_config(artifact, model_dir, recorded, *extra):
    fingerprint = load_artifact(artifact).manifest["fingerprint"]
    return compose_config(
        "refresh",
        [
            f"artifact={artifact}",
            f"fingerprint={fingerprint}",
            f"recorded={recorded}",
            f"models=[{{name: tiny, spec: '{model_dir}', revision: null}}]",
            "settings.dtype=float64",
            "+settings.head_chunk=16",
            *extra,
        ],
    )


def test_refresh_reproduces_and_detects_a_changed_number(tiny_artifact, other_model_dir, tmp_path):
    recorded = tmp_path / "recorded.jsonl"
    refresh.run(refresh_config(tiny_artifact, other_model_dir, recorded, "record=true"))
    refresh.run(refresh_config(tiny_artifact, other_model_dir, recorded))  # reproduces: no error
    row = json.loads(recorded.read_text())
    row["corpus"]["longppl"] *= 1.001
    recorded.write_text(json.dumps(row) + "\n")
    with pytest.raises(PipelineError, match=r"tiny: longppl is .* recorded .*relative tolerance 0\.0001"):
        refresh.run(refresh_config(tiny_artifact, other_model_dir, recorded))


def test_refresh_rejects_another_artifact(tiny_artifact, other_model_dir, tmp_path):
    cfg = refresh_config(
        tiny_artifact, other_model_dir, tmp_path / "r.jsonl", "record=true", "fingerprint=abc123"
    )
    with pytest.raises(PipelineError, match="not the artifact the leaderboard was computed on"):
        refresh.run(cfg)
