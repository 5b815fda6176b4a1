"""A curation's documents kept by a column's top fraction or threshold, with a dataset card.
`make curate-select` (``conf/curate_select.yaml``): ``pipeline.sharing.curated``."""

from __future__ import annotations

from typing import Any

from pipeline.api import run_work
from pipeline.commands.shell import hydra_main, plain
from pipeline.reporting.curate import selection_summary
from pipeline.sharing.curated import SelectOptions, select


def run(cfg: Any) -> dict[str, Any]:
    done = run_work(select, SelectOptions, plain(cfg))
    print(selection_summary(done))
    return done


def main() -> None:
    hydra_main("curate_select", run)


if __name__ == "__main__":
    main()
