"""`make keytokens`: ``python -m pipeline.keytokens [key=value ...]`` (Hydra overrides of
``conf/keytokens.yaml``)."""

from __future__ import annotations

from pipeline.cli import hydra_main
from pipeline.keytokens.run import run
from pipeline.keytokens.settings import KeyTokenSettings


def main() -> None:
    hydra_main("keytokens", lambda cfg: run(KeyTokenSettings.from_config(cfg)))


if __name__ == "__main__":
    main()
