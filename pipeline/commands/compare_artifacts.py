"""Two artifacts compared: the same bytes? the same artifact? how far apart are their values?
`make compare-artifacts` (``conf/compare_artifacts.yaml``): ``pipeline.artifact.comparison``."""

from __future__ import annotations

from typing import Any

from pipeline.api import run_work
from pipeline.artifact.comparison import CompareOptions, compare_artifacts
from pipeline.commands.shell import hydra_main, plain
from pipeline.reporting.compare_artifacts import summary


def run(cfg: Any) -> dict[str, Any]:
    comparison = run_work(compare_artifacts, CompareOptions, plain(cfg))
    print(summary(comparison))
    return comparison.check().outcome


def main() -> None:
    hydra_main("compare_artifacts", run)


if __name__ == "__main__":
    main()
