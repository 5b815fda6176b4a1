"""`make forgetting-curve MODEL=...`: ``python -m pipeline.forgetting [key=value ...]`` (Hydra overrides
of ``conf/forgetting/forgetting.yaml``)."""

from __future__ import annotations

from pipeline.cli import FORGETTING_CONF, hydra_main
from pipeline.forgetting.run import run


def main() -> None:
    hydra_main("forgetting", run, config_dir=FORGETTING_CONF)


if __name__ == "__main__":
    main()
