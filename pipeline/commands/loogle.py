"""`make loogle MODEL=...` (``conf/loogle.yaml``): LooGLE's tasks for one model, a predictions file, its
metrics and a results line per task (``pipeline.jobs.loogle``), printed."""

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
