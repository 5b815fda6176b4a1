"""The LooGLE results file ``artifacts/results/loogle.jsonl``: one strict-JSON line per task of a
`make loogle` run, and per predictions file scored by `make loogle-metrics`. This module owns its
schema (``LooGLELine``): ``loogle_row`` builds a line, ``append`` validates and writes it, ``read_rows``
reads and validates a file (``pipeline.results.lines``); a line the writer refuses, the reader refuses.

A line is keyed like every other entry (``loogle_key``): the model's identity (``keys.model_key``, not
its name), the task, the questions (their fingerprint) and the settings; it holds LooGLE's metrics at
full precision (null where one could not be computed, with the reason), the timeline-reorder
deviations, the predictions file, who measured it (``measured_by``), and the provenance of the other
results lines (library versions, date, wall and CPU seconds).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pipeline import __version__
from pipeline.errors import PipelineError
from pipeline.outputs import Checked
from pipeline.provenance import json_sha256, library_versions
from pipeline.results import lines
from pipeline.results.forgetting import Finite, Length, newest_per
from pipeline.results.keys import model_key

SCHEMA = "loogle/1"
OUTPUT_DATA = "LooGLE Output/"  # the data of a file of LooGLE's Output/ format (`make loogle-metrics`)
RUN_HINT = "run `make loogle MODEL=...` first"
TASK = Literal["shortdep_qa", "longdep_qa", "shortdep_cloze", "longdep_summarization"]

METRIC_LABELS = {  # LooGLE's metrics by the name results lines use, as people read them
    "bleu1": "BLEU-1",
    "bleu4": "BLEU-4",
    "rouge1": "ROUGE-1",
    "rouge2": "ROUGE-2",
    "rougeL": "ROUGE-L",
    "meteor": "METEOR",
    "bertscore": "BERTScore",
    "exact_match": "exact match",
    "partial_match": "partial match",
}

# Each metric's range (docs/loogle.md): BLEU, ROUGE recall, METEOR and the cloze matches are fractions;
# BERTScore (precision of cosine similarities, no rescaling) lies in [-1, 1]. A value past its range by
# more than float rounding (RANGE_SLACK: bert-score computes in float32) is no measurement.
METRIC_RANGES = {name: (0.0, 1.0) for name in METRIC_LABELS} | {"bertscore": (-1.0, 1.0)}
RANGE_SLACK = 1e-6


def range_problem(where: str, value: float | None, low: float, high: float | None, label: str) -> str | None:
    """Why ``value`` is outside [low, high] (``high`` None: no upper bound), or None."""
    if value is None or (low - RANGE_SLACK <= value and (high is None or value <= high + RANGE_SLACK)):
        return None
    bound = f"[{low:g}, {high:g}]" if high is not None else f"at least {low:g}"
    return f"`{where}` is {value!r}, outside {label}'s range {bound}"


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class RunRecord(_Part):
    """What a task ran with (``pipeline.loogle.generation.answering.RunSettings.record``): the fields
    the readers use, of their types (the board shows ``max_length``, the key holds them all). A file of
    LooGLE's ``Output/`` format scored by `make loogle-metrics` records no run: its task, data and
    fingerprint only."""

    task: TASK | None = None
    data: str | None = None
    fingerprint: str | None = None
    model: str | None = None
    max_length: Annotated[Length, Field(ge=1)] | None = None  # a run's; an Output/ file has none
    max_new_tokens: Annotated[Length, Field(ge=1)] | None = None
    limit: Annotated[Length, Field(ge=1)] | None = None
    repetition_penalty: Finite | None = None


class Reorder(_Part):
    """The timeline-reorder deviations (``pipeline.loogle.metrics.reorder.reorder_scores``)."""

    n_questions: Length
    n_ordered: Length
    metrics: dict[str, Finite | None]


class LooGLELine(_Part):
    kind: Literal["loogle/1"]
    result_id: str
    model_name: str
    model: dict[str, Any]
    task: TASK
    data: str
    fingerprint: str
    settings: RunRecord
    n_questions: Annotated[Length, Field(ge=1)]
    metrics: dict[str, Finite | None]
    unavailable: dict[str, str]
    reorder: Reorder | None = None
    predictions: str
    date: str
    wall_seconds: Finite
    cpu_seconds: Annotated[Finite, Field(ge=0)] | None = None
    batch_size: Annotated[int, Field(ge=1)] | None = None
    measured_by: Literal["make loogle", "make loogle-metrics"] | None = None

    @model_validator(mode="after")
    def _a_run_has_its_budget(self) -> LooGLELine:
        if self.settings.max_length is None and self.settings.data != OUTPUT_DATA:
            raise ValueError("`settings.max_length` is missing (only a file of LooGLE's Output/ has none)")
        return self

    @model_validator(mode="after")
    def _metrics_in_range(self) -> LooGLELine:
        """Each metric within its range (``METRIC_RANGES``), each reorder deviation at least 0 and no
        more questions ordered than there are: a value past them is one line naming the metric."""
        problems = [
            range_problem(f"metrics.{name}", self.metrics.get(name), low, high, METRIC_LABELS[name])
            for name, (low, high) in METRIC_RANGES.items()
        ]
        reorder = self.reorder
        if reorder is not None:
            problems += [range_problem(f"reorder.metrics.{name}", value, 0.0, None, "a deviation")
                         for name, value in reorder.metrics.items()]  # fmt: skip
            if reorder.n_ordered > reorder.n_questions:
                n, ordered = reorder.n_questions, reorder.n_ordered
                problems.append(f"`reorder.n_ordered` is {ordered}, more than its {n} questions")
        if problem := next((p for p in problems if p), None):
            raise ValueError(problem)
        return self


def loogle_row(
    model_name: str, model: dict[str, Any], result: dict[str, Any], settings: dict[str, Any],
    seconds: float, cpu_seconds: float, measured_by: str = "make loogle",
) -> dict[str, Any]:  # fmt: skip
    """One line: a task's metrics (``pipeline.loogle.metrics.evaluation.evaluate``'s result) for the model
    ``model`` (``scores.model_record``) run with ``settings``; ``seconds`` and ``cpu_seconds`` its wall
    and CPU time (the task's run, or the metrics alone for `make loogle-metrics`)."""
    key = {
        "model": model,
        "task": result["task"],
        "fingerprint": settings["fingerprint"],
        "settings": settings,
    }
    return {
        "kind": SCHEMA,
        "result_id": json_sha256(key)[:16],
        "model_name": model_name,
        "model": model,
        "task": result["task"],
        "data": settings["data"],
        "fingerprint": settings["fingerprint"],
        "settings": settings,
        "n_questions": result["n_questions"],
        "metrics": result["metrics"],
        "unavailable": result["unavailable"],
        "reorder": result.get("reorder"),
        "predictions": result["predictions"],
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_seconds": round(seconds, 2),
        "cpu_seconds": round(cpu_seconds, 2),
        "measured_by": measured_by,
        "pipeline_version": __version__,
        "libraries": library_versions(),
    }


# A file of these lines as an output (``pipeline.outputs``): one that holds only such lines
KIND = lines.results_lines("LooGLE results", "loogle", LooGLELine)


def append(target: Path | Checked, row: dict[str, Any]) -> None:
    """Validate, then append one strict-JSON line where ``target`` was checked (a path is checked now, as
    ``results=``); a line its reader would refuse (a field a predictions file gave it, of the wrong
    type) is one line, and nothing is written."""
    check(row, f"the line for {target.path if isinstance(target, Checked) else target}")
    lines.append(target, row, KIND)


def check(row: dict[str, Any], where: str) -> None:
    """``row`` is a line ``read_rows`` reads; else one line naming ``where`` and the field."""
    try:
        lines.validate(row, LooGLELine)
    except ValueError as exc:
        raise PipelineError(f"{where}: {exc}, which its readers refuse: nothing was written") from None


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Every row of a results file, in file order, each validated; an error names the line."""
    found = lines.read(path, LooGLELine, what="LooGLE results", kind="LooGLE result", hint=RUN_HINT)
    return [obj for _, obj, _ in found]


def loogle_key(row: dict[str, Any]) -> str | None:
    """The model's identity, the task, the questions and the settings but the fingerprint's copy."""
    identity = model_key(row.get("model"))
    if identity is None:
        return None
    settings = {k: v for k, v in row["settings"].items() if k not in ("model", "fingerprint", "data")}
    return json.dumps([identity, row["task"], row["fingerprint"], settings], sort_keys=True)


def newest_rows(path: str | Path) -> list[dict[str, Any]]:
    """The newest line of each entry (``loogle_key``), in file order."""
    return list(newest_per(read_rows(path), loogle_key).values())
