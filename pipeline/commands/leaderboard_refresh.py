"""Score the pinned models again and compare them with their recorded results.

``longppl leaderboard-refresh [key=value ...]`` (`make leaderboard-refresh`; Hydra overrides of
``conf/leaderboard_refresh.yaml``; ``refresh=<name>`` picks a file of ``conf/refresh/``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.commands.shell import hydra_main, plain
from pipeline.errors import PipelineError
from pipeline.files import strict_json
from pipeline.settings import parse
from pipeline.sharing.refresh import (
    Refresh,
    check_identity,
    check_model,
    recorded_rows,
    recorded_values,
    score_all,
)


def run(cfg: Any) -> list[dict[str, Any]]:
    refresh = parse(Refresh, plain(cfg))
    models = refresh.pinned()
    artifact = check_identity(refresh)
    expected = recorded_values(refresh, models, artifact)  # before the (long) scoring
    fresh_rows = score_all(refresh, models)
    if refresh.record:
        recorded_path = Path(refresh.recorded)
        recorded_path.parent.mkdir(parents=True, exist_ok=True)
        recorded_path.write_text(
            "".join(strict_json(r, sort_keys=True) + "\n" for r in fresh_rows), encoding="utf-8"
        )
        print(f"recorded {len(fresh_rows)} results in {recorded_path}")
        return fresh_rows
    problems = []
    recorded = {} if all(m.expected is not None for m in models) else recorded_rows(Path(refresh.recorded))
    for model, row in zip(models, fresh_rows, strict=True):
        problems += check_model(refresh, model, row, expected[model.name], recorded.get(model.name))
    if problems:
        raise PipelineError("leaderboard refresh differs from the expected results: " + "; ".join(problems))
    print(f"refresh reproduces all {len(fresh_rows)} expected results within {refresh.tolerance:g}")
    return fresh_rows


def main() -> None:
    hydra_main("leaderboard_refresh", run)


if __name__ == "__main__":
    main()
