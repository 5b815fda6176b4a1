"""The one exception type the pipeline raises for problems a user can fix, and how a command ends on one:
a PipelineError (``one_line_errors``), a command line that does not parse (``ArgumentParser``,
``one_line_usage``) and Ctrl-C (``stopped_on_interrupt``; ``stop_while_importing`` before it) are each
one ``error:`` line with exit status 2; a reader that stopped reading ends the output quietly
(``quiet_on_closed_pipe``). A settings type (a pydantic dataclass) built with a bad value raises it too,
the line ``pipeline.settings.parse`` gives (``settings_type``, ``validation_message``).
Foundation: imports only ``pipeline.formats``."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import os
import select
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn, TypeVar

from pipeline.formats import terminal_text

# The exit status of a command stopped by Ctrl-C: 2, the status of every `error:` line, so a caller
# reads one status for "the command did not finish, say why on stderr" (the line says it was stopped).
INTERRUPTED = 2
STOPPED = (
    "error: interrupted (Ctrl-C): the command stopped; the files it wrote so far are whole (run it again "
    "to finish)"
)
# The exit status of a command whose reader closed the pipe (`longppl score --help | head`): what a
# shell reports for a tool that SIGPIPE ended (128 + 13), as `cat` or `git log` end there.
CLOSED_PIPE = 128 + signal.SIGPIPE
T = TypeVar("T")


class PipelineError(Exception):
    """A one-line, actionable error: what is wrong and what to do about it.

    Command-line entry points print it as ``error: <message>`` and exit with status 2,
    without a traceback.
    """


def settings_type(cls: type[T]) -> type[T]:
    """A pydantic dataclass (a settings type) whose constructor raises the PipelineError that
    ``pipeline.settings.parse`` raises for a bad value, not pydantic's ValidationError:
    ``ScoreSettings(context_limit=-5)`` says what ``context_limit=-5`` says on the command line."""
    init = cls.__init__
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        from pydantic import ValidationError

        if len(args) > len(names):
            settings = ", ".join(names)
            raise PipelineError(f"{cls.__name__} has {len(names)} settings ({settings}), not {len(args)}")
        given = dict(zip(names, args, strict=False))  # by name, so that an error names its setting
        if twice := sorted(given.keys() & kwargs.keys()):
            raise TypeError(f"{cls.__name__}() got multiple values for argument '{twice[0]}'")
        given |= kwargs
        try:
            init(self, **given)
        except ValidationError as exc:
            raise PipelineError(validation_message(exc, given)) from None

    cls.__init__ = checked  # type: ignore[method-assign]
    return cls


def validation_message(exc: Any, values: Mapping[str, Any], prefix: str = "") -> str:
    """pydantic's ValidationError as one line: ``setting <prefix><field>=<value>: <what is wrong>`` (its
    first error; ``values``: what was given, for a field that is missing)."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"] if not isinstance(part, int))
    value = values.get(str(first["loc"][0])) if first["type"] == "missing" else first.get("input")
    message = first["msg"].removeprefix("Value error, ")
    return f"setting {prefix}{where}={value!r}: {message}"


@contextlib.contextmanager
def stopped_on_interrupt() -> Iterator[None]:
    """Ctrl-C in the block: one ``error:`` line and exit status ``INTERRUPTED``, no traceback. Every file
    the pipeline writes is whole at any instant (atomic renames, results lines appended whole or cut
    back), so what was written before the interruption stays usable. From here on Ctrl-C is Python's
    KeyboardInterrupt again (``stop_while_importing`` stopped the process at once before)."""
    if signal.getsignal(signal.SIGINT) is _stop_now:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    except KeyboardInterrupt:
        print(STOPPED, file=sys.stderr)
        sys.exit(INTERRUPTED)


def stop_while_importing() -> None:
    """Ctrl-C from now until the command's ``stopped_on_interrupt`` block is the same one line and exit
    status: ``python -m pipeline.commands.<command>`` imports the command's modules (torch,
    transformers: seconds) before its ``main()`` runs, where no ``try`` of the pipeline's can catch
    the KeyboardInterrupt. Nothing is written while modules load, so the process ends at once
    (SystemExit). A SIGINT the process was started to ignore (a background job) stays ignored."""
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _stop_now)


_said: list[bool] = []  # the line is said once, however often Ctrl-C is pressed


def _stop_now(signum: int, frame: Any) -> NoReturn:
    if not _said:
        _said.append(True)
        print(STOPPED, file=sys.stderr, flush=True)
    raise SystemExit(INTERRUPTED)


@contextlib.contextmanager
def quiet_on_closed_pipe() -> Iterator[None]:
    """Output whose reader stopped reading (``longppl score --help | head``, a summary piped into a
    program that exits) ends there, quietly, as a command-line tool's does: no traceback, exit status
    ``CLOSED_PIPE``. What is still buffered is flushed on the way out, also when the block exits
    (``--help`` does), so that the failure comes here, not in the interpreter's last flush; standard
    output is then pointed at /dev/null. A BrokenPipeError from another pipe goes on as it is, and an
    exit with an error keeps its status."""
    try:
        yield
    except BrokenPipeError:
        if not reader_gone(sys.stdout):
            raise
        stop_writing()
        sys.exit(CLOSED_PIPE)
    except SystemExit as exc:
        if not flushed():
            raise SystemExit(exc.code if exc.code not in (0, None) else CLOSED_PIPE) from None
        raise
    if not flushed():
        sys.exit(CLOSED_PIPE)


def flushed() -> bool:
    """Standard output flushed; False (and it pointed at /dev/null) when its reader is gone."""
    try:
        sys.stdout.flush()
        return True
    except BrokenPipeError:
        if not reader_gone(sys.stdout):
            raise
        stop_writing()
        return False


def stop_writing() -> None:
    """Standard output pointed at /dev/null: nothing more to a reader that is gone."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def reader_gone(stream: Any) -> bool:
    """Whether ``stream`` is a pipe whose reading end is closed (poll(2) reports an error on it)."""
    try:
        poll = select.poll()
        poll.register(stream.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (OSError, ValueError, AttributeError):  # no descriptor (a test's capture), or closed
        return False


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """A command's whole run: a PipelineError is one ``error:`` line (control characters escaped,
    ``pipeline.formats.terminal_text``) with exit status 2, Ctrl-C too (``stopped_on_interrupt``),
    and a closed pipe ends it quietly (``quiet_on_closed_pipe``)."""
    with quiet_on_closed_pipe(), stopped_on_interrupt():
        try:
            yield
        except PipelineError as exc:
            print(f"error: {terminal_text(exc)}", file=sys.stderr)
            sys.exit(2)


def usage_error(prog: str, message: str, hint: str) -> NoReturn:
    """A command line that does not parse, as one line: ``error: <prog>: <argparse's message> (<hint>)``
    and exit status 2."""
    print(f"error: {terminal_text(prog)}: {terminal_text(message)} ({hint})", file=sys.stderr)
    sys.exit(2)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose mistakes (an unknown option, a missing or invalid value) are one
    ``error:`` line naming the argument, with exit status 2, instead of its usage block; ``--help``
    is argparse's."""

    def error(self, message: str) -> NoReturn:
        usage_error(self.prog, message, f"{self.prog} --help lists its arguments")


@contextlib.contextmanager
def one_line_usage(hint: str, prog: str | None = None) -> Iterator[None]:
    """In the block, every argparse parser (one a library makes: Hydra's, lm-eval's) reports a command
    line that does not parse as one ``error:`` line naming ``prog`` (default: the parser's) and ending
    in ``(<hint>)``, exit status 2."""
    original = argparse.ArgumentParser.error

    def error(parser: argparse.ArgumentParser, message: str) -> NoReturn:
        usage_error(prog or parser.prog, message, hint)

    argparse.ArgumentParser.error = error  # type: ignore[method-assign]
    try:
        yield
    finally:
        argparse.ArgumentParser.error = original  # type: ignore[method-assign]
