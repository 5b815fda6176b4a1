"""`make leaderboard-refresh`'s last line: where the fresh results were recorded, or that they
reproduce every expected result."""

from __future__ import annotations

from typing import Any


def summary(refreshed: Any) -> str:
    """The line for a ``pipeline.sharing.refresh.Refreshed``."""
    if refreshed.recorded is not None:
        return f"recorded {len(refreshed.rows)} results in {refreshed.recorded}"
    return f"refresh reproduces all {len(refreshed.rows)} expected results within {refreshed.tolerance:g}"
