"""LongPPL as lm-evaluation-harness tasks: lm-eval's own command line, this project's model."""

from __future__ import annotations

import sys

from pipeline.errors import PipelineError, stopped_on_interrupt
from pipeline.lmeval.command_line import run


def main() -> None:
    try:
        with stopped_on_interrupt():
            run(sys.argv[1:])
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
