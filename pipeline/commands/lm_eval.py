"""LongPPL as lm-evaluation-harness tasks: lm-eval's own command line, this project's model.

``longppl lm-eval [--artifact <dir or hf://...>]... <lm-eval flags>`` (`make lm-eval`): lm-eval's own
command line with this project's model and tasks (``pipeline.lmeval.command_line``); a problem with the
inputs is one ``error:`` line with exit status 2."""

from __future__ import annotations

import sys

from pipeline.errors import PipelineError
from pipeline.lmeval.command_line import run


def main() -> None:
    try:
        run(sys.argv[1:])
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
