"""An unknown ``--tasks`` name, told before lm-eval loads: lm-eval's ``TaskManager`` parses every task
file it has (thousands: about 17 s) before it says that a name is not among them.

Every name lm-eval's index holds (a task's ``task``, a group's ``group``, a ``tag``) is written in one
of the YAML files under its index paths (``lm_eval/tasks``, the LongPPL task directory, a user's
``--include_path``); so a name that no such file contains as a whole word is unknown, told from the
files' text alone. The check only refuses: a name some file contains, a glob pattern, a ``.yaml``
path, a directory, or a command run from a ``--config`` file are left to lm-eval.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

TASK_FLAGS = ("--tasks", "-t")
SKIPPED_DIRS = {"__pycache__", ".ipynb_checkpoints"}  # as lm-eval's index skips them
GLOB = re.compile(r"[*?\[]")


def flag_values(args: list[str], names: tuple[str, ...]) -> list[str]:
    """The values given to a flag in ``names`` (``--tasks a b``, ``--tasks=a,b``): argparse's
    ``nargs="+"`` takes every argument up to the next option."""
    values: list[str] = []
    taking = False
    for arg in args:
        if arg.startswith("-"):
            flag, eq, value = arg.partition("=")
            taking = flag in names and not eq
            values += [value] if flag in names and eq else []
        elif taking:
            values.append(arg)
    return values


def asked_names(args: list[str]) -> list[str]:
    """The plain task names a run's arguments ask for (comma- or space-separated), those lm-eval
    matches by name only: not a glob, a ``.yaml`` file or a directory."""
    names = [n.strip() for value in flag_values(args, TASK_FLAGS) for n in value.split(",")]
    return [
        n
        for n in dict.fromkeys(names)
        if n and not GLOB.search(n) and not n.endswith(".yaml") and not Path(n).is_dir()
    ]


def lm_eval_tasks_dir() -> Path | None:
    """lm-eval's own task directory, found without importing lm-eval; None when it is not installed."""
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "tasks"


def yaml_files(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
    elif root.is_dir():
        yield from (p for p in root.rglob("*.yaml") if not SKIPPED_DIRS.intersection(p.parts))


def unknown_names(names: list[str], roots: list[Path]) -> list[str]:
    """The names of ``names`` that no YAML file under ``roots`` contains as a whole word (not inside a
    longer name: letters, digits, ``_``, ``-`` and ``.`` do not border it)."""
    words = {n: re.compile(rb"(?<![\w.-])" + re.escape(n.encode()) + rb"(?![\w.-])") for n in names}
    for root in roots:
        for path in yaml_files(root):
            if not words:
                return []
            try:
                text = path.read_bytes()
            except OSError:
                continue  # lm-eval's index skips a file it cannot read, too
            words = {n: w for n, w in words.items() if not w.search(text)}
    return [n for n in names if n in words]


def unknown_tasks_in(args: list[str], directory: Path) -> list[str]:
    """The task names of a run's ``args`` that lm-eval would not find (``[]`` for ``ls``,
    ``validate`` and a ``--config`` run, and without lm-eval installed)."""
    builtin = lm_eval_tasks_dir()
    configured = any(a.partition("=")[0] in ("--config", "-C") for a in args)
    if builtin is None or configured or (args and args[0] in ("ls", "validate")):
        return []
    names = asked_names(args)
    include = [Path(p).expanduser() for p in flag_values(args, ("--include_path",))]
    return unknown_names(names, [builtin, directory, *include]) if names else []
