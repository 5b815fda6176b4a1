"""Fine-tune a model with LongCE (or CE: source=ce) on Hugging Face Trainer.

``longppl finetune [key=value ...]`` (`make finetune`; Hydra overrides of ``conf/finetune.yaml``): the
settings typed, then one fine-tuning run (``pipeline.training.run``)."""

from __future__ import annotations

from typing import Any

from pipeline.commands.shell import hydra_main, plain
from pipeline.definition import KeyTokenDefinition
from pipeline.models.loading import ModelChoice
from pipeline.settings import Compute, parse
from pipeline.text.corpus import CorpusSpec
from pipeline.training.run import Finetune
from pipeline.training.run import run as finetune_run


def run(cfg: Any) -> dict[str, Any]:
    values = plain(cfg)
    choice, options = ModelChoice.parse(values["model"]), parse(Finetune, values)
    definition, compute = parse(KeyTokenDefinition, values), parse(Compute, values)
    corpus = CorpusSpec.parse(values["corpus"])
    return finetune_run(choice, options, definition, compute, corpus, values["training"], values)


def main() -> None:
    hydra_main("finetune", run)


if __name__ == "__main__":
    main()
