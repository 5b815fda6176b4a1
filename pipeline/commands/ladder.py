"""The context ladder: LongPPL at growing context limits, the effective context length.

``longppl ladder [key=value ...]`` (`make ladder MODEL=...`; Hydra overrides of ``conf/ladder.yaml``):
the score stage at each context limit of a ladder and at full context, the effective context length, its
picture (beside the model's forgetting curve when it has one), the results line and the summary."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pipeline.artifact.reader import open_artifact
from pipeline.commands.shell import hydra_main, plain
from pipeline.formats import file_slug
from pipeline.hub import is_hub_dataset, offline_unless
from pipeline.ladder.run import ladder_line
from pipeline.ladder.settings import LadderSettings
from pipeline.models.loading import ModelChoice, is_local_model
from pipeline.reporting.ladder import summary_text, write_plot
from pipeline.results import forgetting as forgetting_results
from pipeline.results import ladder as results
from pipeline.results.keys import model_key
from pipeline.results.lines import check_writable
from pipeline.settings import Compute, ScoreSettings, parse


def run(cfg: Any) -> dict[str, Any]:
    """The ladder of one model; write the PNG, append the results line, print the summary."""
    started = time.time()
    values = plain(cfg)
    choice = ModelChoice.parse(values["model"])
    ladder, settings, compute = (
        parse(LadderSettings, values),
        parse(ScoreSettings, values),
        parse(Compute, values),
    )
    path = check_writable(Path(str(cfg.results)))  # before any scoring: nothing is lost
    offline_unless(is_hub_dataset(cfg.artifact), not is_local_model(choice.spec))
    artifact = open_artifact(str(cfg.artifact))
    lm = choice.load(compute)
    row = ladder_line(
        artifact, lm, ladder, settings, compute,
        model_name=choice.display_name, progress=bool(cfg.progress), started=started,
    )  # fmt: skip
    name = f"{file_slug(row['model_name'], 'model')}--{file_slug(row['artifact']['name'], 'artifact')}"
    plot = Path(str(cfg.plot_dir)).absolute() / f"{name}--{row['result_id']}.png"
    row["plot"] = str(plot)
    forgetting_path = cfg.forgetting_results or path.with_name("forgetting.jsonl")
    write_plot(row, forgetting_curve(forgetting_path, row["model"]), plot)
    results.append(path, row)
    print(summary_text(row, path))
    return row


def forgetting_curve(path: str | Path, model: dict[str, Any]) -> dict[str, Any] | None:
    """The newest forgetting curve of this very model (its identity, not its name), or None."""
    if not Path(path).is_file():
        return None
    curves = forgetting_results.newest_per_identity(forgetting_results.read_rows(path))
    return curves.get(model_key(model))


def main() -> None:
    hydra_main("ladder", run)


if __name__ == "__main__":
    main()
