"""LooGLE's automatic metrics of a predictions file.

``longppl loogle-metrics predictions=<file> task=<task>`` (`make loogle-metrics`; Hydra overrides of
``conf/loogle_metrics.yaml``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.commands.shell import hydra_main, plain
from pipeline.hub import offline_unless
from pipeline.loogle.metrics.evaluation import evaluate, result_lines, source_of
from pipeline.loogle.metrics.task_scores import bertscore_mode


def run(cfg: Any) -> dict[str, Any]:
    values = plain(cfg)
    source = source_of(values)
    offline_unless(source.data == "hub", bertscore_mode(values["bertscore"]) == "true")
    result = evaluate(Path(str(values["predictions"])), str(values["task"]), source, str(values["bertscore"]))
    print("\n".join(result_lines(result)))
    return result


def main() -> None:
    hydra_main("loogle_metrics", run)


if __name__ == "__main__":
    main()
