"""LooGLE's automatic metrics of a predictions file.
`make loogle-metrics` (``conf/loogle_metrics.yaml``): ``pipeline.loogle.metrics.evaluation``."""

from __future__ import annotations

from typing import Any

from pipeline.api import run_work
from pipeline.commands.shell import hydra_main, plain
from pipeline.loogle.metrics.evaluation import MetricsOptions, evaluate_file
from pipeline.reporting.loogle import metrics_summary


def run(cfg: Any) -> dict[str, Any]:
    result = run_work(evaluate_file, MetricsOptions, plain(cfg))
    print(metrics_summary(result))
    return result


def main() -> None:
    hydra_main("loogle_metrics", run)


if __name__ == "__main__":
    main()
