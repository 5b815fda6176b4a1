"""Reproducible leaderboard refreshes (`make leaderboard-refresh`).

A refresh file (``conf/refresh.yaml``) pins the artifact (path or ``hf://datasets/...@revision`` and
its fingerprint), the models (spec and revision) and the score settings, and points at recorded
results. Every model is scored again, through the score stage's own config, and each of PPL, LongPPL
and LongPPL-soft must match its recorded value within the stated relative tolerance; otherwise the
refresh fails, naming the model and the metric.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pipeline import results
from pipeline.artifacts import HUB_PREFIX, load_artifact, locate_artifact
from pipeline.cli import compose, hydra_main
from pipeline.errors import PipelineError
from pipeline.score.run import run as score


def recorded_rows(path: Path) -> dict[str, dict[str, Any]]:
    """The recorded results by model name (validated like any results file)."""
    if not path.is_file():
        raise PipelineError(
            f"no recorded results at {path}: record them with `make leaderboard-refresh ARGS=record=true`"
        )
    return {obj["model_name"]: obj for _, obj, _ in results.read_lines(path)}


def score_config(cfg: Any, model: Any, scores: Path) -> DictConfig:
    """The score stage's config for one pinned model: ``conf/score.yaml`` composed with the
    ``model=local`` group, the refresh's settings as overrides, then the model's fields."""
    settings = [f"{key}={json.dumps(value)}" for key, value in cfg.settings.items()]
    overrides = ["model=local", f"artifact={cfg.artifact}", f"results={scores}", "progress=false", *settings]
    config = compose("score", overrides)
    config.model = OmegaConf.merge(config.model, model)
    return config


def compare(model: str, fresh: dict[str, Any], recorded: dict[str, Any], tolerance: float) -> list[str]:
    """The mismatches of one model, as one line each."""
    problems = []
    for metric in results.METRICS:
        new, old = fresh["corpus"][metric], recorded["corpus"][metric]
        if (new is None) != (old is None) or (new is not None and abs(new - old) > tolerance * abs(old)):
            problems.append(
                f"{model}: {metric} is {new} now, recorded {old} (relative tolerance {tolerance:g})"
            )
    return problems


def check_fingerprint(cfg: Any) -> None:
    """The pinned artifact must be the one the record was computed on (checked before scoring)."""
    spec = str(cfg.artifact)
    path, _ = locate_artifact(spec if spec.startswith(HUB_PREFIX) else str(Path(spec).absolute()))
    found = load_artifact(path, verify_hashes=False).manifest["fingerprint"]
    if cfg.fingerprint and found != cfg.fingerprint:
        raise PipelineError(
            f"artifact {spec} has fingerprint {found[:12]}, the refresh pins {str(cfg.fingerprint)[:12]}: "
            "it is not the artifact the leaderboard was computed on"
        )


def run(cfg: Any) -> list[dict[str, Any]]:
    check_fingerprint(cfg)
    recorded_path = Path(cfg.recorded)
    recorded = {} if cfg.record else recorded_rows(recorded_path)
    fresh_rows, problems = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for model in cfg.models:
            row = score(score_config(cfg, model, Path(tmp) / "scores.jsonl"))
            fresh_rows.append(row)
            if cfg.record:
                continue
            if model.name not in recorded:
                problems.append(f"{model.name}: no recorded result in {recorded_path}")
            else:
                problems += compare(model.name, row, recorded[model.name], float(cfg.tolerance))
    if cfg.record:
        recorded_path.parent.mkdir(parents=True, exist_ok=True)
        recorded_path.write_text(
            "".join(json.dumps(r, sort_keys=True) + "\n" for r in fresh_rows), encoding="utf-8"
        )
        print(f"recorded {len(fresh_rows)} results in {recorded_path}")
    elif problems:
        raise PipelineError("leaderboard refresh differs from the record: " + "; ".join(problems))
    else:
        print(f"refresh reproduces all {len(fresh_rows)} recorded results within {float(cfg.tolerance):g}")
    return fresh_rows


def main() -> None:
    hydra_main("refresh", run)


if __name__ == "__main__":
    main()
