"""Stage 1 for data selection: a corpus's shards written back with per-document columns.
`make curate` (``conf/curate.yaml``): the job ``pipeline.jobs.curate``, its tasks on datatrove."""

from __future__ import annotations

from typing import Any

from pipeline import api
from pipeline.commands.shell import hydra_main, plain
from pipeline.jobs.curate import CurateJob
from pipeline.reporting.curate import summary


def run(cfg: Any) -> dict[str, Any]:
    done = api.run(CurateJob.from_config(plain(cfg))).value
    print(summary(done))
    return done


def main() -> None:
    hydra_main("curate", run)


if __name__ == "__main__":
    main()
