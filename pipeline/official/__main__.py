"""`make import-official EVALUATOR=<name>`: ``python -m pipeline.official [key=value ...]`` (Hydra
overrides of ``conf/import_official.yaml``)."""

from __future__ import annotations

from pipeline.cli import hydra_main
from pipeline.official.run import run


def main() -> None:
    hydra_main("import_official", run)


if __name__ == "__main__":
    main()
