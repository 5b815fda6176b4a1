"""The forgetting curve of a model: copy and LM accuracy by distance, its memory lengths.
`make forgetting-curve` (``conf/forgetting/forgetting.yaml``): the job ``pipeline.jobs.forgetting``."""

from __future__ import annotations

from typing import Any

from pipeline import api
from pipeline.commands.shell import FORGETTING_CONF, hydra_main, plain
from pipeline.jobs.forgetting import CurveJob
from pipeline.reporting.forgetting import summary_text


def run(cfg: Any) -> dict[str, Any]:
    result = api.run(CurveJob.from_config(plain(cfg)))
    print(summary_text(result.value, result.path))
    return result.check().value


def main() -> None:
    hydra_main("forgetting", run, config_dir=FORGETTING_CONF)


if __name__ == "__main__":
    main()
