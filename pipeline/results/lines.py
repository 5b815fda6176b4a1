"""Results files: one strict-JSON object per line, appended whole and validated on read.

Every results file of the pipeline (``scores.jsonl``, ``forgetting.jsonl``) is written and read here;
each line's schema is a pydantic model in its own module (``pipeline.results.scores``,
``pipeline.results.forgetting``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from pipeline.errors import PipelineError
from pipeline.files import strict_json


def append(path: Path, row: dict[str, Any]) -> None:
    """Append one strict-JSON line (NaN or inf is an error): a single O_APPEND write, flushed to disk
    (concurrent runs stay valid)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (strict_json(row, sort_keys=True, ensure_ascii=False) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read(
    path: str | Path, schema: type[BaseModel], *, what: str, kind: str, hint: str, allow_empty: bool = False
) -> list[tuple[int, dict[str, Any], Any]]:
    """Every non-empty line as (1-based line number, the JSON object, its validated form); an error
    names the file and the line. ``what`` names the file's contents in errors (``scores``), ``kind``
    one line (``result``), ``hint`` the command that writes it."""
    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"no {what} in {path} (the file does not exist): {hint}")
    lines = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if text.strip():
            try:
                lines.append((number, *parse(text, schema)))
            except ValueError as exc:
                raise PipelineError(
                    f"{path} line {number} is not a valid {kind} ({exc}): fix or delete that line"
                ) from None
    if not lines and not allow_empty:
        raise PipelineError(f"no {what} in {path} (the file is empty): {hint}")
    return lines


def parse(text: str, schema: type[BaseModel]) -> tuple[dict[str, Any], Any]:
    """The JSON object of one line and its validated form; ValueError names what is wrong."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} at column {exc.colno}") from None
    return obj, validate(obj, schema)


def validate(obj: Any, schema: type[BaseModel]) -> Any:
    """``obj`` validated by ``schema``; ValueError naming the first problem and where it is."""
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    try:
        return schema.model_validate(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        problem = "is missing" if first["type"] == "missing" else first["msg"].removeprefix("Value error, ")
        raise ValueError(f"`{location(first['loc'])}` {problem}") from None


def location(loc: tuple) -> str:
    """``points[0].copy_mean`` from pydantic's ('points', 0, 'measured', 'copy_mean') (union tags dropped)."""
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc if p not in ("measured", "failed")]
    return "".join(parts).lstrip(".") or "line"
