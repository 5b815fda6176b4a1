"""A key-token artifact as a Hub dataset: its folder written, then uploaded.
`make publish` (``conf/publish.yaml``): ``pipeline.sharing.hub_dataset``."""

from __future__ import annotations

from typing import Any

from pipeline.api import run_work
from pipeline.commands.shell import hydra_main, plain
from pipeline.reporting.publish import summary
from pipeline.sharing.hub_dataset import PublishOptions, publish


def run(cfg: Any) -> Any:
    done = run_work(publish, PublishOptions, plain(cfg))
    print(summary(done))
    return done.folder


def main() -> None:
    hydra_main("publish", run)


if __name__ == "__main__":
    main()
