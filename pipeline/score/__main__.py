"""`make score MODEL=...`: ``python -m pipeline.score [key=value ...]`` (Hydra overrides of
``conf/score.yaml``)."""

from __future__ import annotations

from pipeline.cli import hydra_main
from pipeline.score.run import run


def main() -> None:
    hydra_main("score", run)


if __name__ == "__main__":
    main()
