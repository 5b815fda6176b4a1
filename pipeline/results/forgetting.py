"""The forgetting-curve results file ``artifacts/results/forgetting.jsonl``: one strict-JSON line per
run. This module owns its schema (``ForgettingLine``): ``result_row`` builds a line, ``append``
validates and writes it, ``read_rows`` reads and validates a file (``pipeline.results.lines``).

A line holds the curve (one entry per test length), the memory lengths, and the provenance of the
score stage's lines (model source with its hash or revision, settings, seed, library versions, date,
wall time).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, PlainValidator, Tag

from pipeline import __version__
from pipeline.outputs import Checked
from pipeline.provenance import json_sha256, library_versions
from pipeline.results import lines
from pipeline.results.keys import model_key

SCHEMA = "forgetting-curve/1"
RUN_HINT = "run `make forgetting-curve MODEL=...` first"


def _finite(value: Any) -> float:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > lines.LARGEST:
        raise ValueError(f"is {lines.shown(value)}, beyond +-{lines.LARGEST:g}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError("is not a finite number")
    return float(value)


def _length(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise ValueError(f"is {lines.shown(value)}: a length is an integer in [0, 2**63)")
    return value


def _date(value: Any) -> str:
    try:
        datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{value!r} is not an ISO 8601 time") from None
    return value


Finite = Annotated[float, PlainValidator(_finite)]
Length = Annotated[int, PlainValidator(_length)]
Accuracy = Annotated[Finite, Field(ge=0, le=1)]


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class MeasuredPoint(_Part):
    """One test length: its accuracies and statistics."""

    length: Length
    beyond_context: bool
    error: None = None
    copy_mean: Finite
    copy_std: Finite
    lm_mean: Finite
    lm_std: Finite
    copy_accs: list[Accuracy] = Field(min_length=1)
    lm_accs: list[Accuracy] = Field(min_length=1)
    p_value: Annotated[Finite, Field(ge=0, le=1)] | None = None


class FailedPoint(_Part):
    """A test length that failed, with its error (the run went on)."""

    length: Length
    beyond_context: bool
    error: str


Point = Annotated[
    Annotated[MeasuredPoint, Tag("measured")] | Annotated[FailedPoint, Tag("failed")],
    Discriminator(lambda v: "failed" if isinstance(v, dict) and v.get("error") is not None else "measured"),
]


class Memory(_Part):
    fine: Length
    coarse: Length
    largest_measured: Length
    fine_censored: bool
    coarse_censored: bool


class ForgettingLine(_Part):
    schema_: Literal["forgetting-curve/1"] = Field(alias="schema")
    result_id: str
    model_name: str
    date: Annotated[str, PlainValidator(_date)]
    model: dict[str, Any]
    settings: dict[str, Any]
    text: dict[str, Any]
    points: list[Point] = Field(min_length=1)
    memory: Memory
    complete: bool


def result_row(
    *,
    model_name: str,
    model: dict[str, Any],
    settings: dict[str, Any],
    text: dict[str, Any],
    points: list[dict[str, Any]],
    memory: dict[str, Any],
    seconds: float,
    plot: str | None,
) -> dict[str, Any]:
    """One results line. ``result_id`` hashes what the numbers depend on: the model without its
    local path, the settings and the text's hashes."""
    identity_model = {k: v for k, v in model.items() if k != "path"}
    if model.get("kind") in ("local", "gguf"):  # the spec is a path: the weights' hashes stand for it
        identity_model.pop("spec", None)
    identity_text = {k: v for k, v in text.items() if k != "path"}
    identity = {"model": identity_model, "settings": settings, "text": identity_text}
    return {
        "schema": SCHEMA,
        "result_id": json_sha256(identity)[:16],
        "model_name": model_name,
        "model": model,
        "settings": settings,
        "text": text,
        "points": points,
        "memory": memory,
        "complete": all(p.get("error") is None for p in points),
        "plot": plot,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_seconds": round(seconds, 2),
        "pipeline_version": __version__,
        "libraries": library_versions(),
    }


# A file of these lines as an output (``pipeline.outputs``): one that holds only such lines
KIND = lines.results_lines("forgetting-curve", "forgetting-curve", ForgettingLine)


def append(target: Path | Checked, row: dict[str, Any]) -> None:
    """Validate (a line its readers would refuse is never written), then append one strict-JSON line
    where ``target`` was checked (a path is checked now, as ``results=``)."""
    lines.validate(row, ForgettingLine)
    lines.append(target, row, KIND)


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Every row of a results file, in file order, each validated; an error names the line."""
    found = lines.read(
        path, ForgettingLine, what="forgetting curves", kind="forgetting-curve result", hint=RUN_HINT,
        allow_empty=True,
    )  # fmt: skip
    return [obj for _, obj, _ in found]


def newest_per(rows: list[dict[str, Any]], key: Callable[[dict[str, Any]], str | None]) -> dict[str, dict]:
    """The newest row (by date, then file order) of each ``key(row)``; rows whose key is None are left out."""
    newest: dict[str, tuple[datetime, int, dict[str, Any]]] = {}
    for order, row in enumerate(rows):
        stamp = datetime.fromisoformat(row["date"].replace("Z", "+00:00"))
        stamp = stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)
        name = key(row)
        if name is not None and (name not in newest or (stamp, order) >= newest[name][:2]):
            newest[name] = (stamp, order, row)
    return {name: entry[2] for name, entry in sorted(newest.items())}


def newest_per_identity(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The newest row of each model, by its identity (``keys.model_key``: weights, tokenizer, Hub commit;
    not its name): a curve is shown with a score entry only of the very same model."""
    return newest_per(rows, lambda row: model_key(row.get("model")))


def memory_text(memory: dict[str, Any], which: str) -> str:
    """``4094`` or ``>4094`` (the criterion still held at the largest length measured)."""
    return (">" if memory[f"{which}_censored"] else "") + str(memory[which])
