"""The forgetting curve of a model: copy and LM accuracy by distance, its memory lengths.

``longppl forgetting-curve [key=value ...]`` (`make forgetting-curve MODEL=...`; Hydra overrides of
``conf/forgetting/forgetting.yaml``): the curve, its picture, its results line and summary."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pipeline.commands.shell import FORGETTING_CONF, hydra_main, plain
from pipeline.errors import PipelineError
from pipeline.forgetting.run import CurveOptions, measure
from pipeline.hub import offline_unless
from pipeline.models.loading import ModelChoice, is_local_model
from pipeline.models.logprobs import scorer_for
from pipeline.reporting.forgetting import plot_name, summary_text, write_plot
from pipeline.results import forgetting as results
from pipeline.results.lines import check_writable
from pipeline.settings import Compute, parse
from pipeline.text.corpus import CorpusSpec, load_corpus


def run(cfg: Any) -> dict[str, Any]:
    """Measure one model's forgetting curve; write the PNG, append the results line, return it."""
    started = time.time()
    values = plain(cfg)
    options, compute = parse(CurveOptions, values), parse(Compute, values)  # before anything loads
    choice = ModelChoice.parse(values["model"])
    path = check_writable(Path(str(cfg.results)))  # before any measuring: nothing is lost
    corpus = CorpusSpec.parse(values["corpus"]) if options.source == "corpus" else None
    offline_unless(not is_local_model(choice.spec), corpus is not None and corpus.needs_network)
    choice.check()
    docs = load_corpus(corpus) if corpus is not None else []
    lm = choice.load(compute)
    row = measure(
        lm, scorer_for(lm, compute), options, (corpus, docs),
        model_name=choice.display_name, progress=bool(cfg.progress), started=started,
    )  # fmt: skip
    plot = Path(str(cfg.plot_dir)).absolute() / plot_name(row)
    row["plot"] = str(plot)
    write_plot(row, plot)
    results.append(path, row)
    print(summary_text(row, path))
    failed = [p for p in row["points"] if p["error"] is not None]
    if failed:
        raise PipelineError(
            f"{len(failed)} of {len(row['points'])} lengths failed (first: L={failed[0]['length']}, "
            f"{failed[0]['error']}); the line in {path} records them as failed"
        )
    return row


def main() -> None:
    hydra_main("forgetting", run, config_dir=FORGETTING_CONF)


if __name__ == "__main__":
    main()
