"""Fine-tune a model with LongCE (or CE: source=ce) on Hugging Face Trainer.
`make finetune` (``conf/finetune.yaml``): the job ``pipeline.jobs.finetune``."""

from __future__ import annotations

from typing import Any

from pipeline import api
from pipeline.commands.shell import hydra_main, plain
from pipeline.jobs.finetune import FinetuneJob


def run(cfg: Any) -> dict[str, Any]:
    return api.run(FinetuneJob.from_config(plain(cfg))).value


def main() -> None:
    hydra_main("finetune", run)


if __name__ == "__main__":
    main()
