"""`make validate`: ``python -m pipeline.validation [key=value ...]`` (Hydra overrides of
``conf/validate.yaml``)."""

from __future__ import annotations

from pipeline.cli import hydra_main
from pipeline.validation.run import run


def main() -> None:
    hydra_main("validate", run)


if __name__ == "__main__":
    main()
