"""The one recipe every job goes through (`make score`, `make ladder`, `make forgetting-curve`, `make
loogle`, `make keytokens`, `make finetune`, `make import-official`, the Python API, lm-eval's model),
as lm-eval's ``simple_evaluate`` is the one path of its command line. Top to bottom:

1. the offline rule: while no input needs the Hub, ``HF_HUB_OFFLINE=1`` (a missing file fails at once
   instead of waiting on download retries; the setting is put back after the job: ``offline_unless``,
   the project's one);
2. the outputs: every file the job appends to or writes can be written (before anything loads);
3. the lock: a folder the job writes whole (an artifact, a run's checkpoints: its ``folder``) is held
   for the run, so that a second run on it stops at once naming the holder (``pipeline.artifact.lock``);
4. the model: checked (a missing path, a file that is not GGUF, a Hub id out of reach: one line, now);
5. the inputs: opened and checked (an artifact, a corpus, LooGLE's questions);
6. the model: loaded, with its scorer (``scorer_for``: the compute settings' head blocks and batches);
7. the measurement: the job's own computation, each results line appended as soon as it is made;
8. the warnings: what looks wrong with the numbers, said once the lines are written; an error the
   lines record (lengths of a curve that failed) comes back with the result (``JobResult.check``).

A job that loads no model here declares ``model = None`` (steps 4 and 6 are skipped; its ``measure``
gets None for both): one that loads none (``make import-official``), or whose model loads elsewhere
(stage 1's evaluator, in each of its tasks: ``pipeline.keytokens.step``; ``make finetune``'s, which
the Trainer places, loaded once the job has its data).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pipeline.artifact import lock
from pipeline.artifact.reader import open_artifact
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.hub import is_hub_dataset
from pipeline.models.loading import LoadedModel
from pipeline.models.logprobs import TargetScorer, scorer_for
from pipeline.results.lines import check_writable
from pipeline.settings import Compute

Record = Callable[[dict[str, Any]], None]  # appends one results line (and keeps it)


class ModelInput(Protocol):
    """A job's model: named by a spec (``ModelChoice``), held in memory (``HeldModel``) or loaded."""

    @property
    def needs_hub(self) -> bool: ...

    @property
    def display_name(self) -> str: ...

    def check(self) -> None: ...

    def load(self, compute: Compute) -> LoadedModel: ...


class Job(Protocol):
    """What a kind of job declares; ``run`` does the rest. A job that writes a folder whole also
    declares ``folder`` (locked for the run) and ``folder_use`` (the lock's words: what runs, and how
    to write elsewhere, as ``lock.exclusive`` takes them)."""

    model: ModelInput | None  # None: no model loaded by the recipe (module docstring)
    compute: Compute
    results: Path | None  # where its results lines go (None: kept in memory only)
    results_setting: str  # what its user calls that file: results (a command), results_file (the API)

    def outputs(self) -> dict[str, Path]:
        """The other files it writes, by the setting that names them (a file in a folder it writes)."""

    def needs_hub(self) -> bool:
        """Whether an input other than the model is read from the Hub."""

    def open(self) -> Any:
        """Its inputs, opened and checked before the model loads."""

    def append(self, path: Path, row: dict[str, Any]) -> None:
        """One results line appended, checked by its schema."""

    def measure(
        self, lm: LoadedModel | None, scorer: TargetScorer | None, inputs: Any, record: Record, started: float
    ) -> JobResult:
        """The job's computation; ``record`` appends each results line it makes."""


class ArtifactInput:
    """What a job against one key-token artifact (its ``artifact``: a directory, ``hf://datasets/...``
    or an artifact in memory) declares: no file but its results, the Hub when the artifact is there,
    the artifact opened with every check."""

    artifact: Any

    def outputs(self) -> dict[str, Path]:
        return {}

    def needs_hub(self) -> bool:
        return is_hub_dataset(self.artifact)

    def open(self) -> KeyTokenArtifact:
        return open_artifact(self.artifact)


@dataclass
class JobResult:
    """What a job gives back: its value (a ``ScoreResult``, a ladder or curve line, ...), the results
    lines appended (in ``path``), what looks wrong with the numbers, and an error that its lines
    record (a curve with failed lengths: ``check`` raises it, after its summary is shown)."""

    value: Any
    rows: list[dict[str, Any]] = field(default_factory=list)
    path: Path | None = None
    warnings: list[str] = field(default_factory=list)
    error: str | None = None

    def check(self) -> JobResult:
        """Itself; a PipelineError when the job ended with an error its lines record."""
        if self.error:
            raise PipelineError(self.error)
        return self


def run(job: Job, warn: Callable[[str], None] | None = None) -> JobResult:
    """The job, top to bottom (module docstring); ``warn`` says each warning (default: ``warning:``
    lines on stderr)."""
    with offline_unless(job.needs_hub(), job.model is not None and job.model.needs_hub):
        return measured(job, time.time(), warn)


def measured(job: Job, started: float, warn: Callable[[str], None] | None) -> JobResult:
    """Steps 2 to 8 (module docstring), within the offline rule."""
    path = None if job.results is None else check_writable(job.results, job.results_setting)
    for name, output in job.outputs().items():
        check_writable(output, name)
    folder = getattr(job, "folder", None)
    with lock.exclusive(folder, *job.folder_use) if folder is not None else contextlib.nullcontext():
        if job.model is not None:
            job.model.check()
        inputs = job.open()
        lm = None if job.model is None else job.model.load(job.compute)
        scorer = None if lm is None else scorer_for(lm, job.compute)
        rows: list[dict[str, Any]] = []
        result = job.measure(lm, scorer, inputs, functools.partial(record, job.append, path, rows), started)
    result.rows, result.path = rows, path
    for warning in result.warnings:
        (warn or stderr_warning)(warning)
    return result


def record(
    append: Callable[[Path, dict[str, Any]], None], path: Path | None, rows: list[dict[str, Any]], row: dict
) -> None:
    """One results line: appended (by its schema's ``append``) where the job's results go, and kept."""
    if path is not None:
        append(path, row)
    rows.append(row)


@contextlib.contextmanager
def offline_unless(*remote: bool) -> Iterator[None]:
    """While no input needs the Hub (every ``remote`` is False), ``HF_HUB_OFFLINE=1``: a missing file
    then fails at once instead of waiting on download retries. An explicit setting is kept, and the
    environment is as it was after the block."""
    before = os.environ.get("HF_HUB_OFFLINE")
    if not any(remote):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = before


def stderr_warning(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr)
