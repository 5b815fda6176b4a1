"""An artifact's key-token pages: one document's or every document's, with the index.
`make show` (``conf/show.yaml``): ``pipeline.reporting.keytoken_page``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.api import run_work
from pipeline.commands.shell import hydra_main, plain
from pipeline.reporting.keytoken_page import ShowOptions, show


def run(cfg: Any) -> Path:
    written = run_work(show, ShowOptions, plain(cfg))
    print("\n".join(f"wrote {path}" for path in written))
    return written[-1]


def main() -> None:
    hydra_main("show", run)


if __name__ == "__main__":
    main()
