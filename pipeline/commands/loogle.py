"""LooGLE, with its own protocol: a model's predictions per task, then their metrics.
`make loogle` (``conf/loogle.yaml``): the job ``pipeline.jobs.loogle``."""

from __future__ import annotations

from typing import Any

from pipeline import api
from pipeline.commands.shell import hydra_main, plain
from pipeline.jobs.loogle import LoogleJob
from pipeline.reporting.loogle import run_summary


def run(cfg: Any) -> dict[str, Any]:
    result = api.run(LoogleJob.from_config(plain(cfg)))
    print(run_summary(result.value, result.path))
    return result.value


def main() -> None:
    hydra_main("loogle", run)


if __name__ == "__main__":
    main()
