"""Running a command: Hydra configuration, composed stage configs, one-line errors.

A command runs once, or as a Hydra multirun (``-m``, e.g. ``model.spec=a,b``) on any launcher
(``hydra/launcher=joblib`` for local processes, ``hydra/launcher=slurm`` for a cluster). In a
multirun, a job's PipelineError prints ``error: [<its overrides>] <message>`` (in its log, for cluster
launchers) and the other jobs go on; the multirun then repeats the first failure, ``error: multirun
job failed [<overrides>]: <message>``, and exits with status 2. A command line Hydra cannot compose (an
unknown key, group option or preset, an override that does not parse) is one ``error:`` line naming the
setting, the known ones and the closest, exit status 2, in every command (``HYDRA_FULL_ERROR=1`` keeps
Hydra's traceback), and so is a flag Hydra's own command line does not know (``--nosuch``: argparse's
message on one line, not its usage block); Ctrl-C is one ``error:`` line with exit status 2, and
output whose reader closed the pipe (``--help | head``) ends quietly (``pipeline.errors``). A message
shows control characters escaped (``pipeline.formats.terminal_text``): a title or path in it cannot
drive the terminal.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hydra
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException, HydraException, MissingConfigException, OverrideParseException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pipeline.errors import PipelineError, one_line_usage, quiet_on_closed_pipe, stopped_on_interrupt
from pipeline.files import CONF_DIR
from pipeline.formats import terminal_text

# A command with presets of its own has its own config directory, with conf/ on its search path (the
# `preset` group name is the keytokens stage's in conf/): the forgetting curve.
FORGETTING_CONF = CONF_DIR / "forgetting"
CONF_DIR_RESOLVER = "longppl.conf_dir"
FULL_ERROR = "HYDRA_FULL_ERROR"  # 1: Hydra raises its errors instead of printing them


def register_resolvers() -> None:
    """``${longppl.conf_dir:}``: the absolute path of conf/, for ``hydra.searchpath`` in a config
    directory of its own."""
    if not OmegaConf.has_resolver(CONF_DIR_RESOLVER):
        OmegaConf.register_new_resolver(CONF_DIR_RESOLVER, lambda: CONF_DIR.as_posix())


class JobFailed(CompactHydraException):
    """A multirun job ended with a PipelineError (Hydra prints a CompactHydraException as one line)."""


def hydra_main(config_name: str, run: Callable[[Any], Any], config_dir: Path = CONF_DIR) -> None:
    """Run ``run(cfg)`` with ``<config_dir>/<config_name>.yaml`` and the command line's ``key=value``
    overrides; a PipelineError prints as ``error: <message>`` and exits with status 2, and so does a
    command line Hydra cannot compose (an unknown key, group option or preset, an override that does
    not parse: ``config_error``); Ctrl-C is one ``error:`` line too (``stopped_on_interrupt``)."""
    register_resolvers()
    asked = os.environ.get(FULL_ERROR)  # the user's own: Hydra's traceback for its errors

    @hydra.main(config_path=str(config_dir), config_name=config_name, version_base=None)
    def _entry(cfg) -> None:
        with environment(FULL_ERROR, asked):  # the command itself runs with the user's setting
            try:
                refuse_odd_overrides(cfg, OmegaConf.to_container(HydraConfig.get().overrides.task))
                run(cfg)
            except PipelineError as exc:
                if HydraConfig.get().mode != RunMode.MULTIRUN:
                    print(f"error: {terminal_text(exc)}", file=sys.stderr)
                    sys.exit(2)
                job = HydraConfig.get().job.override_dirname or f"job {HydraConfig.get().job.num}"
                print(f"error: [{job}] {terminal_text(exc)}", file=sys.stderr)
                raise JobFailed(f"error: multirun job failed [{job}]: {terminal_text(exc)}") from None

    # Hydra raises its own errors (composition, overrides, a failed multirun job) to this caller only
    # while HYDRA_FULL_ERROR=1; otherwise it prints them with exit status 1 and a hint.
    name = command_name()
    flags = f"settings are key=value overrides: {name} --help lists them, --hydra-help Hydra's flags"
    with quiet_on_closed_pipe(), stopped_on_interrupt(), environment(FULL_ERROR, "1"):
        try:
            with one_line_usage(flags, prog=name):  # Hydra's argparse: --nosuch, --cfg nope
                _entry()
        except JobFailed as exc:  # after every job ran: the first failure, repeated
            print(exc, file=sys.stderr)
            sys.exit(2)
        except (HydraException, OmegaConfBaseException) as exc:
            if asked == "1":
                raise
            print(f"error: {terminal_text(config_error(exc, config_name, config_dir))}", file=sys.stderr)
            sys.exit(2)


@contextlib.contextmanager
def environment(name: str, value: str | None) -> Iterator[None]:
    """The environment variable ``name`` set to ``value`` (None: unset) for the block, then as it was."""
    before = os.environ.get(name)
    set_variable(name, value)
    try:
        yield
    finally:
        set_variable(name, before)


def set_variable(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def refuse_odd_overrides(cfg: DictConfig, overrides: Any) -> None:
    """A ``+key=value`` override adds a top-level key that the command's config does not have, so no
    part of the command reads it (a typo, or another command's setting); ``~key`` removes a setting the
    command reads: a PipelineError each. Keys inside a group (``+training.x``) are the group's to check."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if any(c in key for c in "./@"):
            continue
        if override.is_add():
            known = ", ".join(sorted(k for k in cfg if k not in ("hydra", key)))
            raise PipelineError(
                f"setting +{key}: this command has no setting {key}, so nothing would read it "
                f"(known: {known})"
            )
        if override.is_delete() and key != "hydra":
            raise PipelineError(
                f"setting ~{key}: the command reads {key}; give it a value instead ({key}=...)"
            )


def config_error(exc: Exception, config_name: str, config_dir: Path) -> str:
    """What Hydra could not compose, as one line: the setting, the known keys or options and the closest
    one (an unknown key, group option or preset; an override that does not parse); else Hydra's
    message on one line."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, OverrideParseException):
        return f"setting {exc.override}: not a key=value override ({message.split(' See ')[0]})"
    if isinstance(exc, MissingConfigException) and exc.options and "/" in (exc.missing_cfg_file or ""):
        group, option = str(exc.missing_cfg_file).rsplit("/", 1)
        return f"setting {group}={option}: no such {group}{closest(option, exc.options)} (known: " + (
            f"{', '.join(exc.options)})"
        )
    if unknown := re.match(r"Could not override '([^']+)'", message):
        key = unknown.group(1)
        return f"setting {given(key)}: {unknown_key(key, config_tree(config_name, config_dir))}"
    return message


def unknown_key(key: str, tree: dict[str, Any] | None) -> str:
    """Why the command's config (``tree``, as plain data; None when it does not compose) has no setting
    ``key``: the first part of ``a.b.c`` that is missing, with the keys of its group (``a.b``: those of
    ``a``; ``hydra.x``: Hydra's own) and the closest; or the part that is a value, not a group."""
    node: Any = tree
    parts = key.split(".")
    for depth, part in enumerate(parts):
        above = ".".join(parts[:depth])
        if depth and not isinstance(node, dict):
            return f"{above} is a setting of its own, not a group of settings: give {above}=<value>"
        if part not in (node or {}):
            known = sorted(k for k in node or {} if depth or k != "hydra")
            what = "setting" if depth == len(parts) - 1 else f"group {'.'.join(parts[: depth + 1])}"
            return f"no such {what}{closest(part, known)} (known: {', '.join(known) or 'none'})"
        node = node[part]
    return "no such setting"


def config_tree(config_name: str, config_dir: Path) -> dict[str, Any] | None:
    """The command's config as it composes without overrides, Hydra's own node included, as plain data
    (interpolations unresolved); None when it does not compose."""
    try:
        cfg = compose(config_name, [], config_dir, hydra_node=True)
        return OmegaConf.to_container(cfg, resolve=False)
    except Exception:  # a config that does not compose: Hydra's message says the rest
        return None


def command_name() -> str:
    """The command as its user runs it: ``longppl <name>`` (``pipeline.cli`` names it so; for ``python -m
    pipeline.commands.<module>`` its module, ``-`` for ``_``)."""
    given = sys.argv[0] if sys.argv else ""
    if given.startswith("longppl "):
        return given
    return "longppl " + Path(given).name.removesuffix(".py").rsplit(".", 1)[-1].replace("_", "-")


def closest(name: str, known: Any) -> str:
    """``, did you mean <the known name closest to name>?``, or nothing."""
    close = difflib.get_close_matches(name, [str(k) for k in known], n=1, cutoff=0.7)
    return f", did you mean {close[0]}?" if close else ""


def given(key: str) -> str:
    """The command line's override of ``key`` (``contex_limit=4``), else the key."""
    for arg in sys.argv[1:]:
        if arg.lstrip("+~").split("=", 1)[0] == key:
            return arg
    return key


def plain(cfg: DictConfig) -> dict[str, Any]:
    """A command's config as plain data, interpolations resolved: what its settings types parse (an
    interpolation that does not resolve is a PipelineError naming its setting)."""
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        what = " ".join(str(exc).split("\n")[0].split())
        raise PipelineError(f"setting {getattr(exc, 'full_key', None) or '?'}: {what}") from None


def compose(
    config_name: str,
    overrides: list[str] | None = None,
    config_dir: Path = CONF_DIR,
    hydra_node: bool = False,
) -> DictConfig:
    """``<config_dir>/<config_name>.yaml`` with its defaults and these overrides, as the command line
    would give it (Hydra's compose API): inside a running command (a stage run by another) or outside;
    ``hydra_node``: with Hydra's own settings (``hydra.run.dir``, ...)."""
    register_resolvers()
    if GlobalHydra.instance().is_initialized():  # the running command's search path
        return hydra.compose(config_name, overrides=overrides or [], return_hydra_config=hydra_node)
    with hydra.initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return hydra.compose(config_name, overrides=overrides or [], return_hydra_config=hydra_node)
