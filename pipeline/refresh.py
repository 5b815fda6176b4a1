"""Reproducible leaderboard refreshes (`make leaderboard-refresh`).

A refresh file in ``conf/refresh/`` pins the artifact (path or ``hf://datasets/...@revision`` and
its fingerprint), the models (spec and revision) and the scoring settings, and points at recorded
results. Every model is scored again and each of PPL, LongPPL and LongPPL-soft must match its
recorded value within the stated relative tolerance; otherwise the refresh fails, naming the model
and the metric.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from pipeline.artifacts import HUB_PREFIX, load_artifact, locate_artifact
from pipeline.cli import CONF_DIR, hydra_main
from pipeline.errors import PipelineError

METRICS = ("ppl", "longppl", "longppl_soft")


def recorded_rows(path: Path) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        raise PipelineError(
            f"no recorded results at {path}: record them with `make leaderboard-refresh ARGS=record=true`"
        )
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {row["model_name"]: row for row in rows}


def score_config(cfg: Any, model: Any, results: Path) -> Any:
    """The stage 2 configuration of one pinned model: ``conf/score.yaml`` with the ``model/local``
    group, the model's fields and the refresh's settings (composed without a nested Hydra run)."""
    base = OmegaConf.load(CONF_DIR / "score.yaml")
    for key in ("defaults", "hydra"):
        base.pop(key, None)
    base.model = OmegaConf.merge(OmegaConf.load(CONF_DIR / "model" / "local.yaml"), model)
    base.keytokens, base.results, base.progress = str(cfg.keytokens), str(results), False
    return OmegaConf.merge(base, cfg.settings)


def compare(model: str, fresh: dict[str, Any], recorded: dict[str, Any], tolerance: float) -> list[str]:
    """The mismatches of one model, as one line each."""
    problems = []
    for metric in METRICS:
        new, old = fresh["corpus"][metric], recorded["corpus"][metric]
        if (new is None) != (old is None) or (new is not None and abs(new - old) > tolerance * abs(old)):
            problems.append(
                f"{model}: {metric} is {new} now, recorded {old} (relative tolerance {tolerance:g})"
            )
    return problems


def check_fingerprint(cfg: Any) -> None:
    """The pinned artifact must be the one the record was computed on (checked before scoring)."""
    from hydra.utils import to_absolute_path

    spec = str(cfg.keytokens)
    path, _ = locate_artifact(spec if spec.startswith(HUB_PREFIX) else to_absolute_path(spec))
    found = load_artifact(path, verify_hashes=False).manifest["fingerprint"]
    if cfg.fingerprint and found != cfg.fingerprint:
        raise PipelineError(
            f"artifact {spec} has fingerprint {found[:12]}, the refresh pins {str(cfg.fingerprint)[:12]}: "
            "it is not the artifact the leaderboard was computed on"
        )


def run(cfg: Any) -> list[dict[str, Any]]:
    from hydra.utils import to_absolute_path

    from pipeline import stage2

    check_fingerprint(cfg)
    recorded_path = Path(to_absolute_path(str(cfg.recorded)))
    recorded = {} if cfg.record else recorded_rows(recorded_path)
    fresh_rows, problems = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for model in cfg.models:
            row = stage2.run(score_config(cfg, model, Path(tmp) / "scores.jsonl"))
            fresh_rows.append(row)
            if not cfg.record:
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
