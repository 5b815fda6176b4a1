"""The commands: one module per make target that runs the pipeline, named after it, each a subcommand of the
``longppl`` command (``pipeline.cli``; ``-`` for ``_``): `make score` runs ``longppl score``, the same as
``python -m pipeline.commands.score``; `make compare-artifacts`, ``longppl compare-artifacts``. A module
docstring's first line is its description in ``longppl --help``. Each is a thin shell, as lm-eval's
command line over ``simple_evaluate``: its Hydra config (``conf/<name>.yaml``) parsed into the settings
types once, the library call, files and printing. ``shell`` holds what they share: the Hydra entry (a
PipelineError is one ``error:`` line, exit status 2; multiruns on any launcher), composed stage configs,
and the config as plain data. Only this package imports Hydra.

Run as a program (``python -m pipeline.commands.<command>``: the interpreter names ``-m`` while it finds
the module, so this package loads first; or the ``longppl`` tool), Ctrl-C while the command's modules
load is already its one ``error:`` line (``pipeline.errors.stop_while_importing``).

Layer: commands, the top. May import: every layer.
"""

import sys
from pathlib import Path

from pipeline.errors import stop_while_importing

if sys.argv[:1] == ["-m"] or Path(sys.argv[0]).name == "longppl":
    stop_while_importing()
