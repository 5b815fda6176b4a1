"""Running a command: Hydra configuration, composed stage configs, one-line errors.

A command runs once, or as a Hydra multirun (``-m``, e.g. ``model.spec=a,b``) on any launcher
(``hydra/launcher=joblib`` for local processes, ``hydra/launcher=slurm`` for a cluster). In a
multirun, a job's PipelineError prints ``error: [<its overrides>] <message>`` (in its log, for cluster
launchers) and the other jobs go on; the multirun then repeats the first failure, ``error: multirun
job failed [<overrides>]: <message>``, and exits with status 2.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from hydra.types import RunMode
from omegaconf import DictConfig

from pipeline.errors import PipelineError

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


class JobFailed(CompactHydraException):
    """A multirun job ended with a PipelineError (Hydra prints a CompactHydraException as one line)."""


def hydra_main(config_name: str, run: Callable[[Any], Any]) -> None:
    """Run ``run(cfg)`` with ``conf/<config_name>.yaml`` and the command line's ``key=value``
    overrides; a PipelineError prints as ``error: <message>`` and exits with status 2."""

    @hydra.main(config_path=str(CONF_DIR), config_name=config_name, version_base=None)
    def _entry(cfg) -> None:
        try:
            run(cfg)
        except PipelineError as exc:
            if HydraConfig.get().mode != RunMode.MULTIRUN:
                print(f"error: {exc}", file=sys.stderr)
                sys.exit(2)
            job = HydraConfig.get().job.override_dirname or f"job {HydraConfig.get().job.num}"
            print(f"error: [{job}] {exc}", file=sys.stderr)
            raise JobFailed(f"error: multirun job failed [{job}]: {exc}") from None

    try:
        _entry()
    except SystemExit as exc:
        # Hydra reports a failed multirun job (raised again in this process, by any launcher) as
        # one line, then exits with status 1; a PipelineError's status is 2.
        if isinstance(exc.__context__, JobFailed):
            sys.exit(2)
        raise


def compose(config_name: str, overrides: list[str] | None = None) -> DictConfig:
    """``conf/<config_name>.yaml`` with its defaults and these overrides, as the command line would
    give it (Hydra's compose API): inside a running command (a stage run by another) or outside."""
    if GlobalHydra.instance().is_initialized():
        return hydra.compose(config_name, overrides=overrides or [])
    with hydra.initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return hydra.compose(config_name, overrides=overrides or [])
