"""Score the pinned models again and compare them with their recorded results.
`make leaderboard-refresh` (``conf/leaderboard_refresh.yaml``): ``pipeline.sharing.refresh``."""

from __future__ import annotations

from typing import Any

from pipeline.api import run_work
from pipeline.commands.shell import hydra_main, plain
from pipeline.reporting.refresh import summary
from pipeline.sharing.refresh import Refresh, refresh_leaderboard


def run(cfg: Any) -> list[dict[str, Any]]:
    refreshed = run_work(refresh_leaderboard, Refresh, plain(cfg))
    print(summary(refreshed))
    return refreshed.rows


def main() -> None:
    hydra_main("leaderboard_refresh", run)


if __name__ == "__main__":
    main()
