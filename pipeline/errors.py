"""The one exception type the pipeline raises for problems a user can fix, and how a command stops on
Ctrl-C (``stopped_on_interrupt``)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

# The exit status of a command stopped by Ctrl-C: 2, the status of every `error:` line, so a caller
# reads one status for "the command did not finish, say why on stderr" (the line says it was stopped).
INTERRUPTED = 2


class PipelineError(Exception):
    """A one-line, actionable error: what is wrong and what to do about it.

    Command-line entry points print it as ``error: <message>`` and exit with status 2,
    without a traceback.
    """


@contextlib.contextmanager
def stopped_on_interrupt() -> Iterator[None]:
    """Ctrl-C in the block: one ``error:`` line and exit status ``INTERRUPTED``, no traceback. Every file
    the pipeline writes is whole at any instant (atomic renames, results lines appended whole or cut
    back), so what was written before the interruption stays usable."""
    try:
        yield
    except KeyboardInterrupt:
        print(
            "error: interrupted (Ctrl-C): the command stopped; the files it wrote so far are whole "
            "(run it again to finish)",
            file=sys.stderr,
        )
        sys.exit(INTERRUPTED)
