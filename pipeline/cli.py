"""The ``longppl`` command: every command of ``pipeline/commands/`` (but the shared ``shell``) as a
subcommand named as its make target, ``-`` for ``_``: ``longppl score model.spec=...`` is ``make score
MODEL=...`` and ``python -m pipeline.commands.score model.spec=...``. The rest of the command line is the
command's own (Hydra overrides, ``--help``, ``-m``; lm-eval's flags for ``lm-eval``).

``longppl --help`` lists the subcommands with the first line of each module's docstring, read from its
source without importing it (no torch for a help text). An unknown subcommand is one ``error:`` line,
exit status 2, naming the known ones and the closest, its control characters escaped
(``pipeline.formats.terminal_text``). Ctrl-C, while the command's modules are imported or while it runs,
is one ``error:`` line with exit status 2 (``pipeline.errors.stopped_on_interrupt``); the help read by a
program that stops reading (``longppl --help | head``) ends quietly (``quiet_on_closed_pipe``).

Layer: commands, the top. May import: every layer.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path

import pipeline.commands
from pipeline.errors import quiet_on_closed_pipe, stopped_on_interrupt
from pipeline.formats import terminal_text

SHARED = {"shell"}  # modules of pipeline/commands/ that are no command
HELP_FLAGS = ("-h", "--help")


def commands() -> dict[str, str]:
    """Subcommand -> its module: one per module of ``pipeline/commands/`` but the shared ones."""
    found = pkgutil.iter_modules(pipeline.commands.__path__)
    names = sorted(m.name for m in found if not m.ispkg and m.name not in SHARED)
    return {name.replace("_", "-"): f"pipeline.commands.{name}" for name in names}


def summary(module: str) -> str:
    """The first line of a module's docstring, read from its source file."""
    spec = importlib.util.find_spec(module)
    source = Path(str(spec.origin)).read_text(encoding="utf-8") if spec and spec.origin else ""
    doc = ast.get_docstring(ast.parse(source)) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


ABOUT = """\
LongPPL: perplexity on the tokens that need long context, as a two-stage offline pipeline (keytokens,
then score). Each command takes Hydra overrides of its config (key=value; -m for a multirun);
`longppl <command> --help` shows its settings. In a checkout, `make <command>` runs the same."""


def help_text(known: dict[str, str]) -> str:
    """The usage, what the tool is, and every subcommand with its module's first docstring line."""
    width = max(map(len, known)) + 2
    rows = [f"  {name:<{width}}{summary(module)}" for name, module in known.items()]
    return "\n".join(["usage: longppl <command> [key=value ...]", "", ABOUT, "", "commands:", *rows])


def unknown(name: str, known: dict[str, str]) -> str:
    """The one-line error for a subcommand that is none of ``known``."""
    close = difflib.get_close_matches(name.replace("_", "-"), known, n=1)
    hint = f": did you mean '{close[0]}'?" if close else ""
    shown = terminal_text(name)
    return f"unknown command '{shown}'{hint} (known: {', '.join(known)}; longppl --help describes each)"


def main(argv: list[str] | None = None) -> None:
    """Run the subcommand of ``argv`` (default: the command line) with the rest of it as its own."""
    args = sys.argv[1:] if argv is None else list(argv)
    known = commands()
    if args[:1] and args[0] in HELP_FLAGS:
        with quiet_on_closed_pipe():
            print(help_text(known))
        return
    if not args:
        print(
            f"error: give a command: longppl <command> [key=value ...] (known: {', '.join(known)})",
            file=sys.stderr,
        )
        sys.exit(2)
    name, rest = args[0], args[1:]
    if name not in known:
        print(f"error: {unknown(name, known)}", file=sys.stderr)
        sys.exit(2)
    sys.argv = [f"longppl {name}", *rest]  # what the command parses, and its name in its own messages
    with stopped_on_interrupt():  # also while the command's modules are imported (torch: seconds)
        importlib.import_module(known[name]).main()


if __name__ == "__main__":
    main()
