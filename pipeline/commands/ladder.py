"""The context ladder: LongPPL at growing context limits, the effective context length.
`make ladder` (``conf/ladder.yaml``): the job ``pipeline.jobs.ladder``."""

from __future__ import annotations

from typing import Any

from pipeline import api
from pipeline.commands.shell import hydra_main, plain
from pipeline.jobs.ladder import LadderJob
from pipeline.reporting.ladder import summary_text


def run(cfg: Any) -> dict[str, Any]:
    result = api.run(LadderJob.from_config(plain(cfg)))
    print(summary_text(result.value, result.path))
    return result.value


def main() -> None:
    hydra_main("ladder", run)


if __name__ == "__main__":
    main()
