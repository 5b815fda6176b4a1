"""LooGLE's automatic metrics of a predictions file.
`make loogle-metrics` (``conf/loogle_metrics.yaml``): ``pipeline.loogle.metrics.evaluation``."""

from __future__ import annotations

from typing import Any

from pipeline.commands.shell import hydra_main, plain
from pipeline.jobs.recipe import offline_unless
from pipeline.loogle.metrics.evaluation import MetricsOptions, evaluate_file, needs_hub
from pipeline.reporting.loogle import metrics_summary
from pipeline.settings import parse


def run(cfg: Any) -> dict[str, Any]:
    options = parse(MetricsOptions, plain(cfg))
    with offline_unless(needs_hub(options)):
        result = evaluate_file(options)
    print(metrics_summary(result))
    return result


def main() -> None:
    hydra_main("loogle_metrics", run)


if __name__ == "__main__":
    main()
