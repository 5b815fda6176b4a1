"""The one recipe every job goes through (`make score`, `make ladder`, `make forgetting-curve`, `make
loogle`, `make keytokens`, `make finetune`, `make import-official`, the Python API, lm-eval's model),
as lm-eval's ``simple_evaluate`` is the one path of its command line. Top to bottom:

0. the job itself: each field of its type, checked when the job is made (``TypedJob``: a job built by
   hand for ``pipeline.api.run`` is refused in one line, never an AttributeError midway);
1. the outputs: every file and folder the job appends to or writes is checked (``pipeline.outputs.check``:
   a place it may write, and only over its own kind of file), before anything loads;
2. the offline rule: while no input needs the Hub, ``HF_HUB_OFFLINE=1`` (a missing file fails at once
   instead of waiting on download retries; the setting is put back after the job: ``offline_unless``,
   the project's one);
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
import dataclasses
import functools
import os
import sys
import time
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pipeline.artifact import lock
from pipeline.artifact.reader import open_artifact
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.hub import is_hub_dataset
from pipeline.models.loading import LoadedModel, ModelChoice
from pipeline.models.logprobs import TargetScorer, scorer_for
from pipeline.outputs import Checked, FileKind, Output
from pipeline.outputs import check as check_output
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


@runtime_checkable
class Job(Protocol):
    """What a kind of job declares; ``run`` does the rest. A job that writes a folder whole also
    declares ``folder`` (locked for the run) and ``folder_use`` (the lock's words: what runs, and how
    to write elsewhere, as ``lock.exclusive`` takes them)."""

    model: ModelInput | None  # None: no model loaded by the recipe (module docstring)
    compute: Compute
    results: Path | None  # where its results lines go (None: kept in memory only)
    results_setting: str  # what its user calls that file: results (a command), results_file (the API)
    results_kind: FileKind  # what that file holds (its schema's ``KIND``: only its lines)

    def outputs(self) -> list[Output]:
        """The other files and folders it writes, each with the setting that names it and its kind."""

    def needs_hub(self) -> bool:
        """Whether an input other than the model is read from the Hub."""

    def open(self) -> Any:
        """Its inputs, opened and checked before the model loads."""

    def append(self, target: Checked, row: dict[str, Any]) -> None:
        """One results line appended where it was checked, checked by its schema."""

    def measure(
        self, lm: LoadedModel | None, scorer: TargetScorer | None, inputs: Any, record: Record, started: float
    ) -> JobResult:
        """The job's computation; ``record`` appends each results line it makes."""


MODEL_MEMBERS = ("needs_hub", "display_name", "check", "load")  # ModelInput's
MODELS = (
    "a model spec (str: an embedded name, a local path or a Hub id, as MODEL= takes), a ModelChoice, "
    "a HeldModel(model, tokenizer) or a LoadedModel"
)


class TypedJob:
    """A job (a dataclass) whose fields are checked when it is made, by a command or by hand for
    ``pipeline.api.run``: each must be of its declared type (a bool field takes True or False only:
    ``progress="no"`` is no False), else one PipelineError naming the field and the type to pass. A
    model given as a str or a path is that spec (``ModelChoice(spec=...)``, as `make score MODEL=...`);
    a path field given as a str is that path."""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for item in dataclasses.fields(self):  # type: ignore[arg-type]
            value, hint = getattr(self, item.name), hints[item.name]
            if not declared(type(value), hint):
                typed = as_declared(f"{type(self).__name__}.{item.name}", value, hint)
                object.__setattr__(self, item.name, typed)


def declared(kind: type, hint: Any) -> bool:
    """Whether a value of class ``kind`` is of the type ``hint`` (a model: has ``ModelInput``'s members;
    a bool only where a bool is meant)."""
    if hint is ModelInput:
        return all(hasattr(kind, member) for member in MODEL_MEMBERS)
    allowed = classes(hint)
    return issubclass(kind, allowed) and (bool in allowed or not issubclass(kind, bool))


def as_declared(name: str, value: Any, hint: Any) -> Any:
    """``value``, which is not of the type ``hint`` of the field ``name``, as the field holds it (a
    model's spec as a ModelChoice, a str as a Path), or a PipelineError naming the field, what it got
    and the type to pass."""
    if hint is ModelInput:
        if isinstance(value, (str, os.PathLike)) and isinstance(os.fspath(value), str):
            return ModelChoice(spec=os.fspath(value))
        raise PipelineError(f"{name} is {shown(value)}: pass {MODELS}")
    allowed = classes(hint)
    if Path in allowed and isinstance(value, str):
        return Path(value)
    names = " or ".join("None" if c is type(None) else c.__name__ for c in allowed)
    hint_text = ""
    if isinstance(value, Mapping) and dataclasses.is_dataclass(allowed[0]):
        hint_text = f"; {allowed[0].__name__}(**{{...}}) builds one from the dict"
    elif value is None and dataclasses.is_dataclass(allowed[0]):
        hint_text = f"; {allowed[0].__name__}() is the defaults"
    expected = f"a {names}" if len(allowed) == 1 else names
    raise PipelineError(f"{name} is {shown(value)}: pass {expected}{hint_text}")


def classes(hint: Any) -> tuple[type, ...]:
    """The classes a type hint admits: a union's, a generic's origin (``Sequence[str]``: Sequence)."""
    if hint is None or hint is type(None):
        return (type(None),)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return tuple(c for arg in typing.get_args(hint) for c in classes(arg))
    if typing.get_origin(hint) is typing.Annotated:
        return classes(typing.get_args(hint)[0])
    return (typing.get_origin(hint) or hint,)


def shown(value: Any) -> str:
    """A value as an error shows it: its type and its start."""
    return f"{type(value).__name__} ({value!r:.80})"


class ArtifactInput:
    """What a job against one key-token artifact (its ``artifact``: a directory, ``hf://datasets/...``
    or an artifact in memory) declares: no file but its results, the Hub when the artifact is there,
    the artifact opened with every check."""

    artifact: Any

    def outputs(self) -> list[Output]:
        return []

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
    if not isinstance(job, Job):
        raise PipelineError(
            f"job is {shown(job)}: pass a job of pipeline.jobs (ScoreJob, LadderJob, CurveJob, LoogleJob, "
            "KeyTokensJob, FinetuneJob, ImportJob, WorkJob)"
        )
    started = time.time()
    results = (
        None
        if job.results is None
        else check_output(Output(job.results_setting, job.results, job.results_kind))
    )
    for output in job.outputs():
        check_output(output)
    with offline_unless(job.needs_hub(), job.model is not None and job.model.needs_hub):
        return measured(job, results, started, warn)


def measured(
    job: Job, results: Checked | None, started: float, warn: Callable[[str], None] | None
) -> JobResult:
    """Steps 3 to 8 (module docstring), within the offline rule, the outputs checked."""
    folder = getattr(job, "folder", None)
    with lock.exclusive(folder, *job.folder_use) if folder is not None else contextlib.nullcontext():
        if job.model is not None:
            job.model.check()
        inputs = job.open()
        lm = None if job.model is None else job.model.load(job.compute)
        scorer = None if lm is None else scorer_for(lm, job.compute)
        rows: list[dict[str, Any]] = []
        result = job.measure(
            lm, scorer, inputs, functools.partial(record, job.append, results, rows), started
        )
    result.rows, result.path = rows, None if results is None else results.path
    for warning in result.warnings:
        (warn or stderr_warning)(warning)
    return result


def record(
    append: Callable[[Checked, dict[str, Any]], None], results: Checked | None, rows: list[dict], row: dict
) -> None:
    """One results line: appended (by its schema's ``append``) where the job's results go, as they were
    checked, and kept."""
    if results is not None:
        append(results, row)
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
