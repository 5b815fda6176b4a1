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
from omegaconf import DictConfig, OmegaConf

from pipeline.errors import PipelineError
from pipeline.files import CONF_DIR

# A command with presets of its own has its own config directory, with conf/ on its search path (the
# `preset` group name is the keytokens stage's in conf/): the forgetting curve.
FORGETTING_CONF = CONF_DIR / "forgetting"
CONF_DIR_RESOLVER = "longppl.conf_dir"


def register_resolvers() -> None:
    """``${longppl.conf_dir:}``: the absolute path of conf/, for ``hydra.searchpath`` in a config
    directory of its own."""
    if not OmegaConf.has_resolver(CONF_DIR_RESOLVER):
        OmegaConf.register_new_resolver(CONF_DIR_RESOLVER, lambda: CONF_DIR.as_posix())


class JobFailed(CompactHydraException):
    """A multirun job ended with a PipelineError (Hydra prints a CompactHydraException as one line)."""


def hydra_main(config_name: str, run: Callable[[Any], Any], config_dir: Path = CONF_DIR) -> None:
    """Run ``run(cfg)`` with ``<config_dir>/<config_name>.yaml`` and the command line's ``key=value``
    overrides; a PipelineError prints as ``error: <message>`` and exits with status 2."""
    register_resolvers()

    @hydra.main(config_path=str(config_dir), config_name=config_name, version_base=None)
    def _entry(cfg) -> None:
        try:
            refuse_added_keys(cfg, list(HydraConfig.get().overrides.task))
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


def refuse_added_keys(cfg: DictConfig, overrides: list[str]) -> None:
    """A ``+key=value`` override adds a top-level key that the command's config does not have, so no
    part of the command reads it (a typo, or another command's setting): a PipelineError. Keys inside a
    group (``+training.x``) are the group's to check."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if override.is_add() and not any(c in key for c in "./@"):
            known = ", ".join(sorted(k for k in cfg if k not in ("hydra", key)))
            raise PipelineError(
                f"setting +{key}: this command has no setting {key}, so nothing would read it "
                f"(known: {known})"
            )


def plain(cfg: DictConfig) -> dict[str, Any]:
    """A command's config as plain data, interpolations resolved: what its settings types parse."""
    return OmegaConf.to_container(cfg, resolve=True)


def compose(config_name: str, overrides: list[str] | None = None, config_dir: Path = CONF_DIR) -> DictConfig:
    """``<config_dir>/<config_name>.yaml`` with its defaults and these overrides, as the command line
    would give it (Hydra's compose API): inside a running command (a stage run by another) or outside."""
    register_resolvers()
    if GlobalHydra.instance().is_initialized():  # the running command's search path
        return hydra.compose(config_name, overrides=overrides or [])
    with hydra.initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return hydra.compose(config_name, overrides=overrides or [])
