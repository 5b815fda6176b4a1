"""lm-evaluation-harness results files with LongPPL tasks, read as `make score` results are.

`make lm-eval` (``pipeline.lmeval``) writes lm-eval's own results JSON (``--output_path``):
``results.<task>`` holds the task's metrics (``"longppl,none"``, ``"ppl,none"``, ...), the task's
config its artifact (``configs.<task>.metadata``: ``longppl_fingerprint``, ``longppl_artifact_record``,
``longppl_unavailable``), and ``config`` the model and score settings (``longppl_model_name``,
``longppl_model``, ``longppl_settings``, from the model ``longppl``). ``read_lmeval_results`` gives one
row per LongPPL task in the frame of ``pipeline.results.score.read_scores`` (``frame_schema()``;
``line`` null, token counts null: lm-eval keeps only the metrics), validated the same way, so a
leaderboard mixes runs made either way. The ``result_id`` is `make score`'s for the same model,
settings and artifact.

A task run on part of its documents (``--limit``: ``n-samples`` effective below original) is not a
leaderboard entry: it is left out and named in ``skipped``. Files in a directory that are not lm-eval
results files are passed over, but one named as lm-eval names its results (``results_*.json``) that does
not read (a write cut short) is named in ``skipped``; a file named directly must be one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, ValidationError, create_model, field_validator

from pipeline.artifact.identity import check_record
from pipeline.errors import PipelineError
from pipeline.metric_registry import Metric, metrics
from pipeline.results import lines
from pipeline.results.keys import model_key
from pipeline.results.score import Count, frame_schema, metric_fields, result_id, unavailable_text

FILTER = "none"  # the tasks' only filter: lm-eval's metric keys are "<metric>,none"
RESULTS_KEYS = ("results", "configs", "config", "n-samples")
MAX_FILE_BYTES = 64 * 2**20  # lm-eval's results JSON (its samples are other files)
RESULTS_PREFIX = "results_"  # lm-eval's results_<date>.json


class TaskRecord(BaseModel):
    """What one task's metrics were computed against (``task_values`` adds the metrics)."""

    model_config = ConfigDict(strict=True)
    fingerprint: str
    contents: str | None = None  # the tables' hash (``artifact.contents``); None: written before it
    identity: dict[str, Any] | None = None  # ``artifact.identity`` (the same artifact); None: before it
    artifact: str
    model_name: str
    context_limit: Count = None
    unavailable: dict[str, str] = {}

    @field_validator("identity")
    @classmethod
    def _identity(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            check_record(value, "longppl_artifact_record.identity")
        return value


@cache
def task_values(registered: tuple[Metric, ...]) -> type[TaskRecord]:
    """One task's metrics (each metric of ``registered``, checked as ``ScoreLine`` checks it) and what
    they were computed against."""
    return create_model("TaskValues", __base__=TaskRecord, **metric_fields(registered))


@dataclass
class LmEvalRows:
    frame: pl.DataFrame  # frame_schema()
    skipped: list[str]  # "<file> <task>: why"


def results_files(location: str | Path) -> list[Path]:
    """A results file, or the JSON files under a directory (lm-eval's ``--output_path``), sorted."""
    path = Path(location)
    if path.is_dir():
        return sorted(p for p in path.rglob("*.json") if p.is_file())
    if not path.is_file():
        raise PipelineError(f"no lm-eval results at {path}: pass a results file or the --output_path folder")
    return [path]


def read_lmeval_results(*locations: str | Path) -> LmEvalRows:
    """The LongPPL tasks of every lm-eval results file at ``locations`` (files or directories)."""
    rows, skipped = [], []
    for location in locations:
        named = Path(location).is_file()
        for path in results_files(location):
            data = load(path, required=named)
            if data is None and path.name.startswith(RESULTS_PREFIX):
                skipped.append(f"{path}: not an lm-eval results file that reads ({unreadable(path)})")
            if data is not None:
                for task in longppl_tasks(data):
                    row, why = task_row(path, data, task)
                    rows += [row] if row else []
                    skipped += [f"{path} {task}: {why}"] if why else []
    return LmEvalRows(pl.DataFrame(rows, schema=frame_schema(), orient="row"), skipped)


def load(path: Path, required: bool) -> dict[str, Any] | None:
    """The results file's JSON; None for another JSON file in a directory (an error if named)."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ValueError(f"over {MAX_FILE_BYTES} bytes, the size limit of a results file")
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject, parse_int=lines.parse_int)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        if not required:
            return None
        why = "nested too deep" if isinstance(exc, RecursionError) else str(exc).splitlines()[0][:100]
        raise PipelineError(f"{path} is not valid JSON ({why})") from None
    if isinstance(data, dict) and all(isinstance(data.get(k), dict) for k in RESULTS_KEYS):
        return data
    if required:
        raise PipelineError(f"{path} is not an lm-eval results file (no {', '.join(RESULTS_KEYS)})")
    return None


def unreadable(path: Path) -> str:
    """Why a results file in a directory does not read (``load`` would raise this if it were named)."""
    try:
        load(path, required=True)
    except PipelineError as exc:
        return str(exc).removeprefix(f"{path} ")
    return "unknown"


def _reject(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def longppl_tasks(data: dict[str, Any]) -> list[str]:
    """The tasks of a results file that a LongPPL task wrote (their config names an artifact)."""
    configs = data["configs"]
    return [
        t for t in data["results"]
        if isinstance(configs.get(t), dict) and "longppl_fingerprint" in (configs[t].get("metadata") or {})
    ]  # fmt: skip


def task_row(path: Path, data: dict[str, Any], task: str) -> tuple[dict[str, Any] | None, str | None]:
    """The task's row of ``frame_schema()``, or why it is left out."""
    counts = data["n-samples"].get(task) or {}
    if why := lines.problem({"n-samples": {task: counts}}):
        raise PipelineError(f"{path}: task {task}: {why}")
    if counts.get("effective") != counts.get("original"):
        return None, f"run on {counts.get('effective')} of {counts.get('original')} documents (--limit)"
    config, meta = data["config"], data["configs"][task]["metadata"]
    settings = config.get("longppl_settings") or {}
    read = {
        "results": {task: data["results"][task]},
        "configs": {task: data["configs"][task]},
        "config": config,
    }
    if why := lines.problem(read):
        raise PipelineError(f"{path}: task {task}: {why}")
    values = {m.name: data["results"][task].get(f"{m.lmeval_name},{FILTER}") for m in metrics()}
    try:
        checked = task_values(metrics())(
            **values,
            fingerprint=meta["longppl_fingerprint"],
            artifact=(meta.get("longppl_artifact_record") or {}).get("name"),
            contents=(meta.get("longppl_artifact_record") or {}).get("contents"),
            identity=(meta.get("longppl_artifact_record") or {}).get("identity"),
            model_name=config.get("longppl_model_name") or data.get("model_name"),
            context_limit=settings.get("context_limit"),
            unavailable=meta.get("longppl_unavailable") or {},
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        field = "" if message.startswith("`") else f"{'.'.join(map(str, first['loc']))} "
        raise PipelineError(f"{path}: task {task}: {field}{message}") from None
    return flat_row(data, checked, settings), None


def flat_row(data: dict[str, Any], task: Any, settings: dict[str, Any]) -> dict[str, Any]:
    """The task's row of ``frame_schema()`` (``task``: its ``task_values``)."""
    model = data["config"].get("longppl_model")
    return {
        "line": None,
        "result_id": result_id(model, task.fingerprint, task.contents, settings) if model else None,
        "model_name": task.model_name,
        "artifact": task.artifact,
        "fingerprint": task.fingerprint,
        "contents": task.contents,
        "identity": json.dumps(task.identity, sort_keys=True, separators=(",", ":"))
        if task.identity
        else None,
        "settings": json.dumps(settings, sort_keys=True, separators=(",", ":")),
        "model": model_key(model),
        "partial": None,  # a run on part of the documents (--limit) is left out before
        "context_limit": task.context_limit,
        **{m.name: getattr(task, m.name) for m in metrics()},
        "n_tokens": None,
        "n_key_tokens": None,
        "key_char_coverage": None,
        "date": evaluation_date(data.get("date")),
        "unavailable": unavailable_text(task.unavailable),
    }


def evaluation_date(value: Any) -> datetime | None:
    """lm-eval's ``date`` (seconds since the epoch, when the evaluation started) as UTC; None when it is
    no time (not a number, NaN, or beyond the years a date holds)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return datetime.fromtimestamp(value, tz=timezone.utc)
    except (OverflowError, ValueError, OSError):
        return None
