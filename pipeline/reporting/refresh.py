"""Reproducible leaderboard refreshes (`make leaderboard-refresh`).

A refresh (a file of the group ``conf/refresh/``, chosen with ``refresh=<name>``; ``embedded`` by
default) pins the artifact (path or ``hf://datasets/...@revision`` and its fingerprint), the models
(spec and revision) and the score settings, and points at recorded results. Every model is scored
again by the score stage, as one Hydra multirun over the pinned models (each a ``model`` group option
written for the run), so on any launcher: one after another by default, ``launcher=joblib`` in
parallel processes, ``launcher=slurm`` as cluster jobs. Each of PPL, LongPPL and LongPPL-soft must
match its recorded value within the stated relative tolerance; otherwise the refresh fails, naming the
model and the metric. A model may instead give ``expected`` values (e.g. a paper's table): only those
metrics are compared, on the corpus values the refresh's ``aggregate`` names (``pooled``: this
project's; ``documents``: per-document values weighted by token counts, as the official
``perplexity.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from pipeline import results
from pipeline.artifacts import HUB_PREFIX, load_artifact, locate_artifact
from pipeline.cli import CONF_DIR, hydra_main
from pipeline.errors import PipelineError
from pipeline.files import strict_json
from pipeline.score import official_mean


def recorded_rows(path: Path) -> dict[str, dict[str, Any]]:
    """The recorded results by model name (validated like any results file)."""
    if not path.is_file():
        raise PipelineError(
            f"no recorded results at {path}: record them with `make leaderboard-refresh ARGS=record=true`"
        )
    return {obj["model_name"]: obj for _, obj, _ in results.read_lines(path)}


def write_model_options(cfg: Any, conf_dir: Path) -> list[str]:
    """One ``model`` group option per pinned model (``conf/model/local.yaml`` with its fields), in a
    config directory of this run; returns their names."""
    base = OmegaConf.load(CONF_DIR / "model" / "local.yaml")
    (conf_dir / "model").mkdir(parents=True, exist_ok=True)
    names = []
    for i, model in enumerate(cfg.models):
        names.append(f"refresh-{i}")
        fields = {k: v for k, v in model.items() if k != "expected"}
        OmegaConf.save(OmegaConf.merge(base, fields), conf_dir / "model" / f"{names[-1]}.yaml")
    return names


def score_command(cfg: Any, options: list[str], conf_dir: Path, scores: Path) -> list[str]:
    """The score stage as a multirun over the pinned models, with the refresh's settings."""
    spec = str(cfg.artifact)
    artifact = spec if spec.startswith(HUB_PREFIX) else str(Path(spec).absolute())
    settings = [f"{key}={json.dumps(value)}" for key, value in cfg.settings.items()]
    command = [sys.executable, "-m", "pipeline.score", "--multirun", f"--config-dir={conf_dir}"]
    command += [f"model={','.join(options)}", f"artifact={json.dumps(artifact)}"]
    command += [f"results={json.dumps(str(scores.absolute()))}", "progress=false", *settings]
    if cfg.get("launcher"):
        command.append(f"hydra/launcher={cfg.launcher}")
    return command + [str(arg) for arg in cfg.get("launcher_args") or []]


def score_all(cfg: Any) -> list[dict[str, Any]]:
    """Score every pinned model (a multirun of the score stage); their result lines, in pinned order."""
    work = Path(str(cfg.get("work_dir") or "artifacts/refresh"))
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work, prefix="run-") as tmp:
        conf_dir, scores = Path(tmp) / "conf", Path(tmp) / "scores.jsonl"
        options = write_model_options(cfg, conf_dir)
        done = subprocess.run(score_command(cfg, options, conf_dir, scores), check=False)
        if done.returncode != 0:
            raise PipelineError(
                f"the score stage failed (exit status {done.returncode}; its errors are above)"
            )
        fresh = {obj["model_name"]: obj for _, obj, _ in results.read_lines(scores)}
    names = [str(model.name) for model in cfg.models]
    missing = [name for name in names if name not in fresh]
    if missing:
        raise PipelineError(
            f"the score stage gave no result for {', '.join(missing)}: each pinned model needs a name"
        )
    return [fresh[name] for name in names]


def corpus_values(row: dict[str, Any], aggregate: str) -> dict[str, Any]:
    """A result's corpus values under the refresh's ``aggregate``."""
    if aggregate == "pooled":
        return row["corpus"]
    if aggregate == "documents":
        return {**row["corpus"], **official_mean(row["documents"])}
    raise PipelineError(f"aggregate={aggregate!r}: use pooled or documents")


def compare(
    model: str,
    fresh: dict[str, Any],
    expected: dict[str, Any],
    tolerance: float,
    metrics=results.METRICS,
    source: str = "recorded",
) -> list[str]:
    """The mismatches of one model (``fresh`` and ``expected`` are corpus values), one line each."""
    problems = []
    for metric in metrics:
        new, old = fresh[metric], expected[metric]
        if (new is None) != (old is None) or (new is not None and abs(new - old) > tolerance * abs(old)):
            problems.append(
                f"{model}: {metric} is {new} now, {source} {old} (relative tolerance {tolerance:g})"
            )
    return problems


def check_fingerprint(cfg: Any) -> None:
    """The pinned artifact must be the one the record was computed on (checked before scoring)."""
    spec = str(cfg.artifact)
    path, _ = locate_artifact(spec if spec.startswith(HUB_PREFIX) else str(Path(spec).absolute()))
    found = load_artifact(path, verify_hashes=False).manifest["fingerprint"]
    if not cfg.fingerprint:
        print(f"note: the refresh pins no fingerprint; artifact {spec} has {found}")
    elif found != cfg.fingerprint:
        raise PipelineError(
            f"artifact {spec} has fingerprint {found[:12]}, the refresh pins {str(cfg.fingerprint)[:12]}: "
            "it is not the artifact the leaderboard was computed on"
        )


def check_model(cfg: Any, model: Any, row: dict[str, Any], recorded: dict[str, Any]) -> list[str]:
    """One model's fresh result against its ``expected`` values, else its recorded result."""
    aggregate, tolerance = str(cfg.get("aggregate", "pooled")), float(cfg.tolerance)
    fresh = corpus_values(row, aggregate)
    expected = model.get("expected")
    if expected is not None:
        values = OmegaConf.to_container(expected)
        return compare(model.name, fresh, values, tolerance, metrics=list(values), source="expected")
    if model.name not in recorded:
        return [f"{model.name}: no recorded result in {cfg.recorded}"]
    return compare(model.name, fresh, corpus_values(recorded[model.name], aggregate), tolerance)


def run(cfg: Any) -> list[dict[str, Any]]:
    check_fingerprint(cfg)
    recorded_path = Path(cfg.recorded)
    needs_record = not cfg.record and any(model.get("expected") is None for model in cfg.models)
    recorded = recorded_rows(recorded_path) if needs_record else {}
    fresh_rows = score_all(cfg)
    if cfg.record:
        recorded_path.parent.mkdir(parents=True, exist_ok=True)
        recorded_path.write_text(
            "".join(strict_json(r, sort_keys=True) + "\n" for r in fresh_rows), encoding="utf-8"
        )
        print(f"recorded {len(fresh_rows)} results in {recorded_path}")
        return fresh_rows
    problems = []
    for model, row in zip(cfg.models, fresh_rows, strict=True):
        problems += check_model(cfg, model, row, recorded)
    if problems:
        raise PipelineError("leaderboard refresh differs from the expected results: " + "; ".join(problems))
    print(f"refresh reproduces all {len(fresh_rows)} expected results within {float(cfg.tolerance):g}")
    return fresh_rows


def main() -> None:
    hydra_main("refresh", run)


if __name__ == "__main__":
    main()
