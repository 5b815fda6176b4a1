"""The context-ladder results file ``artifacts/results/ladder.jsonl``: one strict-JSON line per run.
This module owns its schema (``LadderLine``): ``ladder_row`` builds a line, ``append`` validates and
writes it, ``read_rows`` reads and validates a file (``pipeline.results.lines``).

A line holds, per rung (a context limit; null: full context, always last), the score stage's
corpus and per-document values (as ``scores.jsonl`` holds them) and, per document, the key tokens'
NLL sum and how many of them the rung limits (so that anyone can redo the bootstrap:
``pipeline.ladder.effective.LadderSums.of_row``); the effective context length with its interval;
and the provenance of ``make score``'s lines (model source with its hash or revision, the artifact's
name and fingerprint, settings, library versions, date, wall time).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pipeline.outputs import Checked
from pipeline.results import lines
from pipeline.results.forgetting import Finite, Length, newest_per
from pipeline.results.keys import ladder_key, ladder_partial
from pipeline.results.score import ArtifactRef, CorpusValues, result_id, same_artifact

SCHEMA = "context-ladder/1"
RUN_HINT = "run `make ladder MODEL=...` first"


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class RungLine(_Part):
    context_limit: Length | None
    corpus: CorpusValues
    documents: list[dict[str, Any]]
    key_nll: list[Finite]  # per document: the key tokens' NLL sum
    key_limited: list[Length]  # per document: the key tokens whose context the rung limits
    n_key_limited: Length
    informative: bool
    delta: Finite | None = None
    copied_documents: Length
    seconds: Finite


class Reading(_Part):
    """The effective length at one tolerance: a rung (None: full context) or undefined."""

    tolerance: Annotated[Finite, Field(gt=0)]
    length: Length | None
    censored: Literal["left", "right"] | None
    top: Length | None = None  # the largest rung that limits a key token
    interval: list[Length | None] | None
    undefined: str | None = None


class Effective(Reading):
    confidence: Annotated[Finite, Field(gt=0, lt=1)]
    bootstrap: Length
    seed: Length
    resamples_used: Length
    by_tolerance: list[Reading]


class LadderLine(_Part):
    schema_: Literal["context-ladder/1"] = Field(alias="schema")
    result_id: str
    model_name: str
    date: str
    model: dict[str, Any]
    artifact: ArtifactRef
    settings: dict[str, Any]
    rungs: list[RungLine] = Field(min_length=2)
    effective: Effective

    @model_validator(mode="after")
    def _ascending_then_full(self) -> LadderLine:
        limits = [r.context_limit for r in self.rungs]
        if limits[-1] is not None or None in limits[:-1] or limits[:-1] != sorted(set(limits[:-1])):
            raise ValueError("rungs must be ascending context limits, then full context (null)")
        for reading in [self.effective, *self.effective.by_tolerance]:
            ends = [reading.length, reading.top, *(reading.interval or [])]
            if any(end not in limits for end in ends):
                raise ValueError(
                    f"the effective length at tolerance {reading.tolerance:g} names a context limit that is "
                    f"not one of its rungs ({', '.join(str(e) for e in ends if e not in limits)})"
                )
        return self


def ladder_row(
    base: dict[str, Any],
    settings: dict[str, Any],
    rungs: list[dict[str, Any]],
    effective: dict[str, Any],
    *,
    seconds: float,
    plot: str | None,
) -> dict[str, Any]:
    """One results line. ``base`` is the full rung's ``scores.jsonl`` line (``score_row``): its model,
    artifact, model name, date, versions and libraries are the ladder's; ``result_id`` hashes the
    model, the artifact's fingerprint and contents hash, and the settings."""
    artifact = base["artifact"]
    return {
        "schema": SCHEMA,
        "result_id": result_id(base["model"], artifact["fingerprint"], artifact.get("contents"), settings),
        "model_name": base["model_name"],
        "model": base["model"],
        "artifact": base["artifact"],
        "settings": settings,
        "rungs": rungs,
        "effective": effective,
        "plot": plot,
        **{k: base[k] for k in ("date", "pipeline_version", "libraries")},
        "wall_seconds": round(seconds, 2),
    }


# A file of these lines as an output (``pipeline.outputs``): one that holds only such lines
KIND = lines.results_lines("ladder", "ladder", LadderLine)


def append(target: Path | Checked, row: dict[str, Any]) -> None:
    """Validate (a line its readers would refuse is never written), then append one strict-JSON line
    where ``target`` was checked (a path is checked now, as ``results=``)."""
    lines.validate(row, LadderLine)
    lines.append(target, row, KIND)


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Every row of a results file, in file order, each validated; an error names the line."""
    found = lines.read(
        path,
        LadderLine,
        what="context ladders",
        kind="context-ladder result",
        hint=RUN_HINT,
        allow_empty=True,
    )
    return [obj for _, obj, _ in found]


def newest_on(path: str | Path | None, artifact: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The newest ladder per model and settings (``keys.ladder_key``: the model's identity and the full
    rung's score settings, never its name alone) on the same artifact as ``artifact`` (a record with its
    fingerprint, contents and identity, as the leaderboard's board: ``scores.same_artifact``), over all
    of its documents (a ladder on part of them is left out); {} without a file. A full-context score
    entry shows the ladder of its ``keys.score_key``."""
    if path is None or not Path(path).is_file():
        return {}
    rows = [r for r in read_rows(path) if same_artifact(r["artifact"], artifact) and not ladder_partial(r)]
    return newest_per(rows, ladder_key)


def length_text(length: int | None, censored: str | None, top: int | None) -> str:
    """``2048``; ``>2048`` (not within tolerance below full context: 2048 is the largest rung that
    limits a key token, ``top``, or ``length`` itself where that is given); ``<=512`` (within tolerance
    at the lowest rung); ``n/a``."""
    if censored == "right" or (length is None and top is not None):
        return f">{top or length}"
    if length is None:
        return "n/a"
    return f"<={length}" if censored == "left" else str(length)


def reading_text(reading: dict[str, Any]) -> tuple[str, str]:
    """The length and its interval as text: ``>2048``, ``[1024, >2048]``."""
    if reading.get("undefined") or reading["interval"] is None:
        return "n/a", "n/a"
    low, high = (length_text(end, None, reading["top"]) for end in reading["interval"])
    return length_text(reading["length"], reading["censored"], reading["top"]), f"[{low}, {high}]"
