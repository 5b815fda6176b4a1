"""Stage 2: a causal LM scored against a key-token artifact: PPL, LongPPL, LongPPL-soft.
`make score` (``conf/score.yaml``): the job ``pipeline.jobs.score``."""

from __future__ import annotations

from typing import Any

from pipeline import api
from pipeline.commands.shell import hydra_main, plain
from pipeline.jobs.score import ScoreJob
from pipeline.reporting.score import summary


def run(cfg: Any) -> dict[str, Any]:
    result = api.run(ScoreJob.from_config(plain(cfg)))
    print(summary(result.rows[0], result.path))
    return result.rows[0]


def main() -> None:
    hydra_main("score", run)


if __name__ == "__main__":
    main()
