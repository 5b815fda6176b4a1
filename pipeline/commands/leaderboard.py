"""Tables and plots of everything scored, from the results files.

``longppl leaderboard [key=value ...]`` (`make leaderboard`; Hydra overrides of
``conf/leaderboard.yaml``): every result read, the tables and plots rendered and written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic.dataclasses

from pipeline.commands.shell import hydra_main, plain
from pipeline.files import write_bytes_atomic
from pipeline.reporting import loogle as loogle_board
from pipeline.reporting.board import other_contents, partial_notes, select
from pipeline.reporting.leaderboard import read_all_results, render
from pipeline.settings import Text, parse


@pydantic.dataclasses.dataclass(frozen=True)
class LeaderboardOptions:
    results: str  # the score stage's results file
    out_dir: str
    artifact: Text | None = None  # name, fingerprint, contents hash or prefix; None: the newest result's
    benchmarks: str | None = None  # CSV: `model`, then one numeric column per benchmark
    forgetting_results: str | None = None  # None: forgetting.jsonl beside `results`
    ladder_results: str | None = None  # None: ladder.jsonl beside `results`
    # lm-eval results files or folders (`make lm-eval`); None: the folder lm-eval/ beside `results`
    lmeval_results: str | list[str] | None = None


def run(cfg: Any) -> dict[str, Path]:
    """Load, select, render; print the Markdown leaderboard and the written paths."""
    options = parse(LeaderboardOptions, plain(cfg))
    results = Path(options.results)
    scores = read_all_results(results, options.lmeval_results)
    paths = render(
        scores,
        Path(options.out_dir),
        None if options.benchmarks is None else Path(options.benchmarks),
        artifact=options.artifact,
        source=results if results.is_file() else None,
        forgetting=options.forgetting_results or results.with_name("forgetting.jsonl"),
        ladder=options.ladder_results or results.with_name("ladder.jsonl"),
    )
    print(paths["leaderboard.md"].read_text(encoding="utf-8"))
    for name, data in loogle_board.files(results.with_name("loogle.jsonl")).items():  # LooGLE beside LongPPL
        write_bytes_atomic(Path(options.out_dir) / name, data)
        paths[name] = Path(options.out_dir) / name
        if name.endswith(".md"):
            print(data.decode())
    if note := other_contents(scores, select(scores, options.artifact)):
        print(note)
    for note in partial_notes(scores):
        print(note)
    for path in paths.values():
        print(f"wrote {path}")
    return paths


def main() -> None:
    hydra_main("leaderboard", run)


if __name__ == "__main__":
    main()
