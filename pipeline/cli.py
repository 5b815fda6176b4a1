"""Running a command: Hydra configuration, composed stage configs, one-line errors."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from pipeline.errors import PipelineError

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def hydra_main(config_name: str, run: Callable[[Any], Any]) -> None:
    """Run ``run(cfg)`` with ``conf/<config_name>.yaml`` and the command line's ``key=value``
    overrides; a PipelineError prints as ``error: <message>`` and exits with status 2."""

    @hydra.main(config_path=str(CONF_DIR), config_name=config_name, version_base=None)
    def _entry(cfg) -> None:
        try:
            run(cfg)
        except PipelineError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)

    _entry()


def compose(config_name: str, overrides: list[str] | None = None) -> DictConfig:
    """``conf/<config_name>.yaml`` with its defaults and these overrides, as the command line would
    give it (Hydra's compose API): inside a running command (a stage run by another) or outside."""
    if GlobalHydra.instance().is_initialized():
        return hydra.compose(config_name, overrides=overrides or [])
    with hydra.initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return hydra.compose(config_name, overrides=overrides or [])
