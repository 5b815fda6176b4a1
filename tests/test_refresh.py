"""Leaderboard refresh: passes on recorded results, fails naming model and metric when one is altered."""

from __future__ import annotations

import json

import pytest

from pipeline.artifact.reader import load_artifact
from pipeline.commands import leaderboard_refresh as refresh_command
from pipeline.errors import PipelineError
from tests.conftest import compose_config


def refresh_config(artifact, model_dir, recorded, *extra, models=None):
    loaded = load_artifact(artifact)
    models = models or f"[{{name: tiny, spec: '{model_dir}', revision: null}}]"
    return compose_config(
        "leaderboard_refresh",
        [
            f"artifact={artifact}",
            f"fingerprint={loaded.manifest['fingerprint']}",
            f"contents={loaded.contents}",
            f"discrete={loaded.identity.discrete}",
            f"recorded={recorded}",
            f"models={models}",
            f"work_dir={recorded.parent / 'work'}",
            "settings.dtype=float64",
            "+settings.head_chunk=16",
            *extra,
        ],
    )


def test_refresh_reproduces_on_any_launcher_and_detects_a_changed_number(
    tiny_artifact, other_model_dir, tiny_model_dir, tmp_path
):
    """Recorded one job after the other (Hydra's default launcher), reproduced exactly on the joblib
    launcher (two processes); an altered record fails, naming the model and the metric."""
    models = (
        f"[{{name: tiny, spec: '{other_model_dir}', revision: null}}, "
        f"{{name: own, spec: '{tiny_model_dir}', revision: null}}]"
    )
    recorded = tmp_path / "recorded.jsonl"
    one_by_one = refresh_command.run(
        refresh_config(tiny_artifact, None, recorded, "record=true", models=models)
    )
    parallel = refresh_command.run(
        refresh_config(tiny_artifact, None, recorded, "launcher=joblib", models=models)
    )
    assert [r["model_name"] for r in parallel] == ["tiny", "own"]
    assert [r["corpus"] for r in parallel] == [r["corpus"] for r in one_by_one]
    assert not list((tmp_path / "work").iterdir())  # the run's configs and scores are cleaned up
    rows = [json.loads(line) for line in recorded.read_text().splitlines()]
    rows[0]["corpus"]["longppl"] *= 1.001
    recorded.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(PipelineError, match=r"tiny: longppl is .* recorded .*relative tolerance 0\.0001"):
        refresh_command.run(refresh_config(tiny_artifact, None, recorded, models=models))
    rows[0]["corpus"]["longppl"] /= 1.001
    doc = next(iter(rows[1]["artifact"]["identity"]["documents"]))
    rows[1]["artifact"]["identity"]["documents"][doc]["keys"] = "f" * 32  # recorded on other key spans
    recorded.write_text("".join(json.dumps(row) + "\n" for row in rows))
    other = rf"recorded result of own .*scored on another artifact .*key tokens or key spans differ in {doc}"
    with pytest.raises(PipelineError, match=other) as e:
        refresh_command.run(refresh_config(tiny_artifact, None, recorded, models=models))
    assert "own" in str(e.value) and "tiny" not in str(e.value)


def test_refresh_rejects_another_artifact(tiny_artifact, other_model_dir, tmp_path):
    cfg = refresh_config(
        tiny_artifact, other_model_dir, tmp_path / "r.jsonl", "record=true", "fingerprint=abc123"
    )
    with pytest.raises(PipelineError, match="not the artifact the leaderboard was computed on"):
        refresh_command.run(cfg)
