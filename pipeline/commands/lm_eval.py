"""LongPPL as lm-evaluation-harness tasks: lm-eval's own command line, this project's model."""

from __future__ import annotations

import sys

from pipeline.errors import one_line_errors, one_line_usage
from pipeline.lmeval.command_line import run

FLAGS = "longppl lm-eval run --help lists lm-eval's flags"


def main() -> None:
    with one_line_errors(), one_line_usage(FLAGS, prog="longppl lm-eval"):
        run(sys.argv[1:])


if __name__ == "__main__":
    main()
