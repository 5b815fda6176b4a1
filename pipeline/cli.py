"""Running a stage as a command: Hydra configuration and one-line errors."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def hydra_main(config_name: str, run: Callable[[Any], Any]) -> None:
    """Run ``run(cfg)`` with ``conf/<config_name>.yaml`` and the command line's ``key=value``
    overrides; a PipelineError prints as ``error: <message>`` and exits with status 2."""
    import hydra

    @hydra.main(config_path=str(CONF_DIR), config_name=config_name, version_base=None)
    def _entry(cfg) -> None:
        try:
            run(cfg)
        except PipelineError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)

    _entry()
