"""A command's work that loads no model, as a job of the recipe (`make show`, `make leaderboard`, `make
publish`, `make compare-artifacts`, `make leaderboard-refresh`, `make loogle-evidence`, `make
loogle-keytokens`, `make loogle-metrics`, `make curate-select`), so that every command runs through
``pipeline.api.run``: the recipe holds the offline rule for it (``HF_HUB_OFFLINE=1`` unless an input is
on the Hub, put back after) and its errors and warnings are every job's. Its outputs are named by what
it reads (a page per document, a leaderboard's folder), so the work checks them itself, with the same
check (``pipeline.outputs``), before it writes anything."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipeline.jobs.recipe import JobResult, Record
from pipeline.outputs import Checked, Output


@dataclass(frozen=True)
class WorkJob:
    """``work`` run by the recipe; ``hub``: whether an input is read from the Hub."""

    work: Callable[[], Any]
    hub: bool = False
    model = None  # no model loaded by the recipe
    compute = None
    results = None  # what it writes, it checks itself (module docstring)
    results_setting = "out"
    results_kind = None

    def outputs(self) -> list[Output]:
        return []

    def needs_hub(self) -> bool:
        return self.hub

    def open(self) -> None:
        return None

    @staticmethod
    def append(target: Checked, row: dict[str, Any]) -> None:
        raise NotImplementedError("a command's work appends its own lines, where it checked them")

    def measure(self, lm: None, scorer: None, inputs: None, record: Record, started: float) -> JobResult:
        return JobResult(self.work())
