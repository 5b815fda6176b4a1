"""LooGLE, with its own protocol: a model's predictions per task, then their metrics.

``longppl loogle [key=value ...]`` (`make loogle MODEL=...`; Hydra overrides of ``conf/loogle.yaml``):
LooGLE's tasks with its protocol for one model, a predictions file per task (a killed run resumes it),
then LooGLE's metrics of each, printed (``pipeline.loogle.generation.benchmark``)."""

from __future__ import annotations

from typing import Any

from pipeline.commands.shell import hydra_main, plain
from pipeline.loogle.generation.benchmark import LoogleOptions, run_benchmark
from pipeline.models.loading import ModelChoice
from pipeline.settings import Compute, parse


def run(cfg: Any) -> dict[str, Any]:
    values = plain(cfg)
    return run_benchmark(
        ModelChoice.parse(values["model"]), parse(Compute, values), parse(LoogleOptions, values)
    )


def main() -> None:
    hydra_main("loogle", run)


if __name__ == "__main__":
    main()
