"""Tables and plots of everything scored, from the results files.
`make leaderboard` (``conf/leaderboard.yaml``): ``pipeline.reporting.leaderboard``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.api import run_work
from pipeline.commands.shell import hydra_main, plain
from pipeline.reporting.leaderboard import LeaderboardOptions, write_leaderboard


def run(cfg: Any) -> dict[str, Path]:
    board = run_work(write_leaderboard, LeaderboardOptions, plain(cfg))
    print("\n".join([*board.markdown, *board.notes, *(f"wrote {path}" for path in board.paths.values())]))
    return board.paths


def main() -> None:
    hydra_main("leaderboard", run)


if __name__ == "__main__":
    main()
