"""The bounds on LooGLE's inputs (its data files and the predictions files scored against them) and the
readers that hold them: a file is read only when it is a regular file within its size, a JSON line
only as UTF-8 text and one object, and every string of a row only when it is text (no lone surrogate,
which no encoder writes) within its length. Each refusal is one line naming the file, the row or line
and the field, before any model loads.

The bounds are generous against LooGLE's real data (its test files, ``LooGLE-testdata/``): its longest
document holds 130,088 characters, its longest answer 1,452 characters (203 words, a summary), and a
whole task in the one-row-per-question layout (each row repeating its document) a few hundred MB.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError

MAX_DATA_BYTES = 2**30  # one data file (JSONL or Parquet): ~4x a whole task in the question layout
MAX_ROWS = 100_000  # rows of one task (LooGLE's largest has under 2,000 questions)
MAX_TEXT_CHARS = 16_000_000  # a document's text (``input``, ``context``): ~120x LooGLE's longest
MAX_FIELD_CHARS = 200_000  # any other string of a row (a title, a question, an answer, evidence)
MAX_DEPTH = 8  # containers nested in a field (LooGLE's nest 2)
TEXT_FIELDS = ("input", "context", "qa_pairs")  # a document's text, or all its questions
MAX_PREDICTIONS_BYTES = 256 * 2**20  # one predictions file (a whole LooGLE run writes a few MB)
MAX_LINE_BYTES = 16 * 2**20  # one line of a predictions file (an Output/ line holds one document's)
# One prediction: ~70x LooGLE's longest real answer (1,452 characters), ~50x in words (203), ~20x its
# longest generation (500 new tokens); a longer one costs minutes of ROUGE per question.
MAX_PREDICTION_CHARS = 100_000
MAX_PREDICTION_WORDS = 10_000


def open_regular(path: Path, what: str, max_bytes: int) -> int:
    """A read descriptor of ``path``, a regular file of at most ``max_bytes``; else one line saying what
    it is (a folder, a FIFO, a device: never read, so never a hang or an endless read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except IsADirectoryError:
        raise PipelineError(f"{what} {path} is a folder, not a file") from None
    except OSError as exc:
        raise PipelineError(f"{what} {path} cannot be read ({exc.strerror or exc})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "a FIFO, a socket or a device"
        raise PipelineError(f"{what} {path} is {kind}, not a regular file")
    if info.st_size > max_bytes:
        os.close(fd)
        raise PipelineError(
            f"{what} {path} holds {info.st_size} bytes, over the {max_bytes}-byte limit of one such file"
        )
    return fd


def check_size(path: Path, what: str) -> None:
    """``path`` is a regular data file within ``MAX_DATA_BYTES`` (a Parquet file, before it is read)."""
    os.close(open_regular(path, what, MAX_DATA_BYTES))


def json_lines(path: Path, what: str, max_bytes: int, max_line: int) -> Iterator[tuple[int, Any]]:
    """Each non-blank line of a JSONL file with its 1-based number, parsed; one line naming the file and
    the line for bytes that are not UTF-8, a line that is not JSON or over ``max_line`` bytes."""
    with os.fdopen(open_regular(path, what, max_bytes), "rb") as stream:
        number = 0
        while data := stream.readline(max_line + 1):
            number += 1
            if len(data) > max_line and not data.endswith(b"\n"):
                raise PipelineError(f"{path}, line {number}: longer than {max_line} bytes, the limit")
            if data.strip():
                yield number, parsed(data, path, number)


def parsed(data: bytes, path: Path, number: int) -> Any:
    """One line's JSON value; one line naming the first byte that is not UTF-8, or what is not JSON."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        column = exc.start + 1
        raise PipelineError(
            f"{path}, line {number}: byte {data[exc.start]:#04x} at column {column} is not UTF-8"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PipelineError(f"{path}, line {number}: not valid JSON ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:  # an integer of thousands of digits, deep nesting
        detail = str(exc).splitlines()[0][:80] if str(exc) else "nested too deeply"
        raise PipelineError(f"{path}, line {number}: not a JSON value this reads ({detail})") from None


def jsonl_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a LooGLE data file (JSONL), each an object; at most ``MAX_ROWS``."""
    rows = []
    for number, row in json_lines(path, "data file", MAX_DATA_BYTES, MAX_DATA_BYTES):
        if not isinstance(row, dict):
            raise PipelineError(f"{path}, line {number}: a row must be a JSON object, not {kind(row)}")
        rows.append(row)
        if len(rows) > MAX_ROWS:
            raise PipelineError(f"{path}: more than {MAX_ROWS} rows, the limit of one task's file")
    return rows


def kind(value: Any) -> str:
    """A JSON value's type in words."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def text_problem(text: str, limit: int) -> str | None:
    """Why ``text`` is not a string a row may hold (over ``limit`` characters, a lone surrogate: text
    no UTF-8 file holds, which every hash and writer of it would refuse), or None."""
    if len(text) > limit:
        return f"holds {len(text)} characters, over the limit of {limit}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"holds a lone surrogate ({text[exc.start]!a}) at character {exc.start + 1}: not text"
    return None


def check_row(row: Any, where: str) -> dict[str, Any]:
    """A data row: an object whose every string is text within its bound (``TEXT_FIELDS`` within
    ``MAX_TEXT_CHARS``, any other within ``MAX_FIELD_CHARS``)."""
    if not isinstance(row, dict):
        raise PipelineError(f"{where}: a row must be an object, not {kind(row)}")
    for key, value in row.items():
        check_strings(value, where, str(key), MAX_TEXT_CHARS if key in TEXT_FIELDS else MAX_FIELD_CHARS)
    return row


def check_strings(value: Any, where: str, field: str, limit: int = MAX_FIELD_CHARS) -> None:
    """Every string in ``value`` (its keys too) is text within ``limit`` characters, and it nests at
    most ``MAX_DEPTH`` deep; else one line naming ``where`` and the field."""
    stack: list[tuple[Any, str, int]] = [(value, field, 0)]
    while stack:
        item, name, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise PipelineError(f"{where}, field {name[:80]}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, str) and (why := text_problem(item, limit)):
            raise PipelineError(f"{where}, field {name[:80]}: {why}")
        if isinstance(item, dict):
            for key in item:
                if why := text_problem(str(key), MAX_FIELD_CHARS):
                    raise PipelineError(f"{where}, a key of field {name[:80]}: {why}")
            stack += [(v, f"{name}.{k}", depth + 1) for k, v in item.items()]
        elif isinstance(item, list | tuple):
            stack += [(v, f"{name}[{i}]", depth + 1) for i, v in enumerate(item)]
