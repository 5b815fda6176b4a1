"""Results files: one strict-JSON object per line, appended whole and validated on read.

Every results file of the pipeline (``scores.jsonl``, ``forgetting.jsonl``) is written and read here;
each line's schema is a pydantic model in its own module (``pipeline.results.score``,
``pipeline.results.forgetting``), which describes its files as an output (``results_lines``: a file
``pipeline.outputs.check`` lets a command append to holds only lines of its schema).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import math
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from pipeline.errors import PipelineError
from pipeline.files import strict_json
from pipeline.outputs import Checked, FileKind, Output, check, command_name, confirm, unchanged

# What a line may hold, read or written: at most MAX_LINE_BYTES (a result of ~15,000 documents; a
# longer line would cost gigabytes to read), containers nested at most MAX_DEPTH deep (a result
# nests 6), floats finite and within +-LARGEST (larger ones overflow the readers' arithmetic and
# plots).
MAX_LINE_BYTES = 16 * 2**20
MAX_DEPTH = 32
LARGEST = 1e300
MAX_DIGITS = 400  # an integer literal longer than this is beyond LARGEST, and read as a LongInteger
SHOWN_DIGITS = 40  # an integer of more digits is shown as its number of digits


class AnyLine(BaseModel):
    """A line of no particular schema: any JSON object (``results_lines``' default)."""

    model_config = ConfigDict(extra="allow")


def results_lines(what: str, command: str, schema: type[BaseModel] = AnyLine) -> FileKind:
    """A results file of one kind of line as an output (``pipeline.outputs``): ``what`` names the kind
    (``scores``), ``command`` the make target that appends such lines; an existing file is this
    command's when every line is a line of ``schema`` (a line cut short by a killed write skipped, as
    its readers skip it; an empty file is anybody's)."""
    mine = functools.partial(foreign_line, schema, what)
    return FileKind(f"{what} files", command_name(command), "results.jsonl", mine, appended=True)


def foreign_line(schema: type[BaseModel], what: str, stream: IO[bytes]) -> str | None:
    """The first line of ``stream`` that is no line of ``schema`` and was not cut short, as "line N, ...";
    None when there is none."""
    number = 0
    while data := stream.readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(data) > MAX_LINE_BYTES and not data.endswith(b"\n"):
            return f"line {number}, longer than any results line ({MAX_LINE_BYTES} bytes)"
        data = data.removesuffix(b"\n")
        if data.strip():
            try:
                parse(decoded(data), schema)
            except ValueError as exc:
                if not torn(data):
                    return f"line {number}, which is no {what} line ({exc})"
    return None


JSON_LINES = results_lines("results", "score")  # any JSON object per line


def append(target: Path | Checked, row: dict[str, Any], kind: FileKind = JSON_LINES) -> None:
    """Append one strict-JSON line (NaN or inf is an error), whole or not at all, where ``target`` was
    checked (a path is checked here, as ``results=`` holding ``kind``'s lines): the file is locked
    for the write (concurrent runs never mix or cut each other's lines), a short write continues, a
    failed one (a full disk) is cut back to the file's size before it and is a PipelineError. A file
    whose last line was cut short by an earlier failure gets a newline first, so no line is glued to it."""
    checked = target if isinstance(target, Checked) else check(Output("results", Path(target), kind))
    path = checked.path
    line = (strict_json(row, sort_keys=True, ensure_ascii=False) + "\n").encode()
    if why := problem(row):
        raise PipelineError(f"the line for {path}: {why}, which its readers refuse: nothing was written")
    if len(line) > MAX_LINE_BYTES + 1:
        raise PipelineError(
            f"the line for {path} is {len(line) - 1} bytes, over the {MAX_LINE_BYTES}-byte limit of a "
            "results line: score fewer documents per run (documents=...): nothing was written"
        )
    fd = open_for_append(checked)
    try:
        with contextlib.suppress(OSError):  # a filesystem without flock: the one O_APPEND write stays
            fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        try:
            write_all(fd, line)
            os.fsync(fd)
        except OSError as exc:
            raise PipelineError(append_failure(path, fd, size, exc)) from None
        except BaseException:  # interrupted (Ctrl-C) mid-line: the file as it was
            os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)  # releases the lock


def open_for_append(checked: Checked) -> int:
    """A descriptor appending to the checked file (made, with its folders, when missing), only where the
    check found it (a symlink on the way swapped since is refused, the last one is never followed)
    and only to the file it found, or a new one, or another of its kind (``pipeline.outputs.confirm``)."""
    real = unchanged(checked)
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(real, flags, 0o644)
    except OSError as exc:
        raise PipelineError(
            f"could not append the result to {checked.path} ({exc.strerror or exc}): nothing was written"
        ) from None
    try:
        confirm(checked, fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_all(fd: int, data: bytes) -> None:
    """Every byte of ``data`` (``os.write`` may write fewer than asked: continue with the rest)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(f"wrote {written} bytes")
        view = view[written:]


def append_failure(path: Path, fd: int, size: int, exc: OSError) -> str:
    """Cut the file back to ``size`` (what it held before this append); the message says what happened."""
    why = exc.strerror or str(exc)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    except OSError:
        return (
            f"could not append the result to {path} ({why}), nor remove the part written: its last "
            "line is cut short; delete that line, free space and run again"
        )
    return f"could not append the result to {path} ({why}): the file is as it was; free space and run again"


def read(
    path: str | Path, schema: type[BaseModel], *, what: str, kind: str, hint: str, allow_empty: bool = False
) -> list[tuple[int, dict[str, Any], Any]]:
    """Every non-empty line as (1-based line number, the JSON object, its validated form); an error
    names the file and the line. A line cut short (``torn``: a write killed mid-line, or a full disk
    under an older writer) is skipped with a note on stderr, so one torn line never costs the others.
    ``what`` names the file's contents in errors (``scores``), ``kind`` one line (``result``), ``hint``
    the command that writes it."""
    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"no {what} in {path} (the file does not exist): {hint}")
    lines, torn_lines = [], []
    for number, data in numbered_lines(path, kind):
        if data.strip():
            try:
                lines.append((number, *parse(decoded(data), schema)))
            except ValueError as exc:
                if not torn(data):
                    raise PipelineError(
                        f"{path} line {number} is not a valid {kind} ({exc}): fix or delete that line"
                    ) from None
                torn_lines.append(number)
                print(
                    f"note: {path} line {number} was cut short (a write that was killed, or a full disk): "
                    f"skipped, the other lines are read; delete that line to silence this note",
                    file=sys.stderr,
                )
    if not lines and not allow_empty:
        why = f"its only line, {torn_lines[0]}, was cut short" if torn_lines else "the file is empty"
        raise PipelineError(f"no {what} in {path} ({why}): {hint}")
    return lines


def numbered_lines(path: Path, kind: str) -> Iterator[tuple[int, bytes]]:
    """The file's lines (without their newline) with their 1-based numbers, read one at a time; a line
    over ``MAX_LINE_BYTES`` is a PipelineError (before it is read whole)."""
    with path.open("rb") as stream:
        number = 0
        while data := stream.readline(MAX_LINE_BYTES + 1):
            number += 1
            if len(data) > MAX_LINE_BYTES and not data.endswith(b"\n"):
                raise PipelineError(
                    f"{path} line {number} is longer than {MAX_LINE_BYTES} bytes, the size limit of a "
                    f"{kind} line (no run writes one): fix or delete that line"
                )
            yield number, data.removesuffix(b"\n")


def torn(data: bytes) -> bool:
    """Whether a line that does not parse is the start of one cut short: every line is written as one
    JSON object ending in ``}``, so a line that begins one and ends otherwise (or inside a UTF-8
    character) was cut; a line edited into something else is not."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.reason == "unexpected end of data"
    return text.lstrip().startswith("{") and not text.rstrip().endswith("}")


def decoded(data: bytes) -> str:
    """One line's bytes as text; ValueError names the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8: byte {data[exc.start]:#04x} at column {exc.start + 1}") from None


@dataclass(frozen=True)
class LongInteger:
    """An integer literal of more than ``MAX_DIGITS`` digits (``parse_int``), kept as its number of
    digits: beyond any line's range, and never converted (Python refuses one of over 4300 digits)."""

    digits: int


def parse_int(literal: str) -> int | LongInteger:
    """A JSON integer literal (``json.loads``' ``parse_int``): its value, or a ``LongInteger``."""
    return int(literal) if len(literal) <= MAX_DIGITS else LongInteger(len(literal.lstrip("-")))


def shown(value: Any) -> str:
    """A value as a message shows it, bounded: an integer of many digits by its number of digits."""
    if isinstance(value, LongInteger):
        return f"an integer of {value.digits} digits"
    if isinstance(value, int) and abs(value) >= 10**SHOWN_DIGITS:
        return f"an integer of {len(str(abs(value)))} digits"
    text = str(value)
    return text if len(text) <= 80 else f"{text[:80]}..."


def parse(text: str, schema: type[BaseModel]) -> tuple[dict[str, Any], Any]:
    """The JSON object of one line and its validated form; ValueError names what is wrong."""
    try:
        obj = json.loads(text, parse_int=parse_int)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise ValueError(f"`line` is nested deeper than {MAX_DEPTH} levels") from None
    if why := problem(obj):
        raise ValueError(why)
    return obj, validate(obj, schema)


def problem(obj: Any) -> str | None:
    """The first value, in line order, that no line may hold (nested beyond ``MAX_DEPTH``, a number
    beyond ``LARGEST``, NaN or infinity), as "`field` why"; None when there is none (the range of
    each integer is its schema's to check)."""
    stack: list[tuple[Any, str, int]] = [(obj, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"`{where[:80]}...` is nested deeper than {MAX_DEPTH} levels"
        if isinstance(value, dict):
            items = [(v, f"{where}.{k}" if where else str(k), depth + 1) for k, v in value.items()]
            stack.extend(reversed(items))
        elif isinstance(value, list):
            stack.extend(reversed([(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]))
        elif isinstance(value, float) and not (math.isfinite(value) and abs(value) <= LARGEST):
            kind = "not a finite number" if not math.isfinite(value) else f"beyond +-{LARGEST:g}"
            return f"`{where or 'line'}` is {value}, {kind}"
        elif isinstance(value, LongInteger) or (isinstance(value, int) and abs(value) > LARGEST):
            return f"`{where or 'line'}` is {shown(value)}, beyond +-{LARGEST:g}"
    return None


def validate(obj: Any, schema: type[BaseModel]) -> Any:
    """``obj`` validated by ``schema``; ValueError naming the first problem and where it is."""
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    try:
        return schema.model_validate(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        problem = "is missing" if first["type"] == "missing" else first["msg"].removeprefix("Value error, ")
        if not first["loc"] and problem.startswith("`"):  # a check of the whole line names its field
            raise ValueError(problem) from None
        raise ValueError(f"`{location(first['loc'])}` {problem}") from None


def location(loc: tuple) -> str:
    """``points[0].copy_mean`` from pydantic's ('points', 0, 'measured', 'copy_mean') (union tags dropped)."""
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc if p not in ("measured", "failed")]
    return "".join(parts).lstrip(".") or "line"
