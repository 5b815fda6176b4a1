"""The LooGLE job (`make loogle`): LooGLE's tasks with its protocol for one model, every task's questions
and prompts checked before any generation, then per task its predictions file (a killed run resumes
it), LooGLE's metrics and its results line (``loogle.jsonl``, ``pipeline.results.loogle``)."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pydantic.dataclasses
from pydantic import Strict

from pipeline.artifact.lock import exclusive
from pipeline.definition import NotBool
from pipeline.errors import PipelineError, settings_type
from pipeline.formats import file_slug, terminal_text
from pipeline.jobs.recipe import JobResult, ModelInput, Record, TypedJob
from pipeline.loogle.data.questions import TASKS, Question, check_task
from pipeline.loogle.data.reading import DataSource, fingerprint, load_questions, tasks_held
from pipeline.loogle.generation.answering import (
    RunSettings,
    check_batch_size,
    check_prompts,
    new_tokens_for,
    predict_task,
    prompt_limit,
)
from pipeline.loogle.generation.predictions import KIND as PREDICTIONS
from pipeline.loogle.generation.predictions import resumed
from pipeline.loogle.metrics.evaluation import evaluate
from pipeline.loogle.metrics.reorder import check_timeline
from pipeline.loogle.metrics.task_scores import bertscore_mode
from pipeline.marks import folder_for
from pipeline.models.loading import LoadedModel, ModelChoice
from pipeline.models.logprobs import TargetScorer
from pipeline.outputs import Output, check, kernel_filesystem, special_file
from pipeline.provenance import json_sha256
from pipeline.results import loogle as loogle_lines
from pipeline.results.keys import model_identity
from pipeline.results.loogle import loogle_row
from pipeline.results.score import model_record
from pipeline.settings import Compute, parse, parse_group

# A count or a length: a whole number (``batch_size=true`` is no 1, ``2.5`` no 2); each is range-checked
# where it is used, with its own message.
WholeNumber = Annotated[int, NotBool, Strict()]


@settings_type
@pydantic.dataclasses.dataclass(frozen=True)
class LoogleOptions:
    """``conf/loogle.yaml``'s own settings (the model and compute settings are their own types). The
    limit, the lengths and ``bertscore`` are checked where they are used, each with its own message."""

    task: str
    data: str
    dataset: str
    revision: str | None
    max_length: WholeNumber | None
    max_new_tokens: WholeNumber | None
    limit: WholeNumber | None
    batch_size: WholeNumber
    predictions_dir: str
    results: str
    bertscore: str | bool
    progress: bool

    @property
    def source(self) -> DataSource:
        return DataSource(self.data, self.dataset, self.revision)


def selected(task: str, source: DataSource, limit: int | None) -> dict[str, list[Question]]:
    """Each task's questions (its first ``limit``), loaded and checked before any model loads; task=all:
    each task the data has (the Hub: all four; the sample or a folder: those it holds, said in a note)."""
    if limit is not None and limit < 1:
        raise PipelineError(f"setting limit={limit}: at least 1 question, or null for all")
    tasks = tasks_held(source) if task == "all" else (check_task(task),)
    if task == "all" and len(tasks) < len(TASKS):
        where = "the embedded sample (data/loogle/README.md)" if source.data == "sample" else source.data
        print(
            f"note: task=all: {terminal_text(where)} has {', '.join(tasks)} only, of LooGLE's four "
            "(data=hub has all four)"
        )
    return {t: load_questions(t, source)[:limit] for t in tasks}


class Clock:
    """Wall and CPU seconds since it was made (CPU: this process's, every thread's: on a shared machine
    the CPU time says what the run cost where the wall time says how long it waited too)."""

    def __init__(self) -> None:
        self.started, self.cpu_started = time.perf_counter(), time.process_time()

    def wall(self) -> float:
        return time.perf_counter() - self.started

    def cpu(self) -> float:
        return time.process_time() - self.cpu_started


@dataclass(frozen=True)
class LoogleJob(TypedJob):
    """`make loogle`'s settings, typed: the model, LooGLE's own settings, and where its predictions
    files and results lines go."""

    model: ModelInput
    compute: Compute
    options: LoogleOptions

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> LoogleJob:
        """``conf/loogle.yaml`` as plain data, typed and checked."""
        return cls(
            parse_group(ModelChoice, values, "model"), parse(Compute, values), parse(LoogleOptions, values)
        )

    results_setting = "results"

    @property
    def results(self) -> Path:
        return Path(self.options.results)

    results_kind = loogle_lines.KIND

    def outputs(self) -> list[Output]:
        folders = folder_for("folders of predictions files", "loogle")
        return [Output("predictions_dir", Path(self.options.predictions_dir), folders)]

    def needs_hub(self) -> bool:
        return self.options.source.data == "hub" or bertscore_mode(self.options.bertscore) == "true"

    def open(self) -> dict[str, list[Question]]:
        """Each task's questions and generation length, checked before the model loads, and what lies
        at its predictions files' paths (whatever the model's identity) a file a run can rewrite."""
        check_batch_size(self.options.batch_size)
        questions = selected(self.options.task, self.options.source, self.options.limit)
        for task, task_questions in questions.items():
            new_tokens_for(task, self.options.max_new_tokens)
            pattern = predictions_name(self.model.display_name, "*", task, self.options.source.label, "*")
            for path in sorted(Path(self.options.predictions_dir).glob(pattern)):
                check_predictions_path(path)
            check_timeline(task, task_questions)
        return questions

    append = staticmethod(loogle_lines.append)

    def measure(
        self,
        lm: LoadedModel,
        scorer: TargetScorer,
        questions: dict[str, list[Question]],
        record: Record,
        started: float,
    ) -> JobResult:
        """Every task's prompts checked before any generation, then each task in turn: its predictions
        (resumed), its metrics, its results line."""
        model = model_record(lm, add_bos=True)
        plans = {
            task: self.plan(lm, task, task_questions, model) for task, task_questions in questions.items()
        }
        with contextlib.ExitStack() as locks:
            for _, path in plans.values():
                locks.enter_context(exclusive(path, "LooGLE run", "pass predictions_dir=<another folder>"))
            results = {
                task: self.run_task(lm, questions[task], *plan, model, record) for task, plan in plans.items()
            }
        return JobResult(results)

    def run_task(
        self, lm: LoadedModel, questions: list[Question], settings: RunSettings, path: Path,
        model: dict[str, Any], record: Record,
    ) -> dict[str, Any]:  # fmt: skip
        """One task: its predictions (resumed), its metrics, its results line."""
        clock, options = Clock(), self.options
        predict_task(lm, questions, settings, path, options.batch_size, options.progress, model)
        result = evaluate(path, settings.task, options.source, bertscore_mode(options.bertscore))
        row = loogle_row(settings.model, model, result, settings.record(), clock.wall(), clock.cpu())
        record({**row, "batch_size": options.batch_size})
        return {**result, "wall_seconds": row["wall_seconds"], "cpu_seconds": row["cpu_seconds"]}

    def plan(
        self, lm: LoadedModel, task: str, questions: list[Question], model: dict[str, Any]
    ) -> tuple[RunSettings, Path]:
        """The task's run settings and predictions file (named by the model's identity, checked a file a
        run can rewrite); every prompt checked to fit its budget."""
        options, name = self.options, self.model.display_name
        new_tokens = new_tokens_for(task, options.max_new_tokens)
        budget = prompt_limit(lm.context_length, options.max_length, new_tokens, task)
        fields = (options.source.label, fingerprint(questions), name, budget, new_tokens)
        settings = RunSettings(task, *fields, options.limit)
        check_prompts(lm.tokenizer, questions, budget)
        identity = json_sha256(model_identity(model))[:12]
        folder = Path(options.predictions_dir)
        path = folder / predictions_name(name, identity, task, options.source.label, str(budget))
        check_predictions_path(path)
        resumed(path, settings.record(), [q.qid for q in questions], model)  # refused before any generation
        older = folder / f"{file_slug(f'{name}--{task}--{options.source.label}--L{budget}', task)}.jsonl"
        if older.is_file():
            print(
                f"note: {older} is named by the model's name alone (an older version): not resumed, as it "
                f"could hold another model's answers; this run writes {path.name}",
                file=sys.stderr,
            )
        return settings, path


def predictions_name(name: str, identity: str, task: str, data: str, budget: str) -> str:
    """A predictions file's name: the model's name and identity (a hash of what identifies it:
    ``results.keys.model_identity``), the task, the data and the prompt budget. ``identity`` and
    ``budget`` may be ``*`` (a glob pattern of every model of that name)."""
    return f"{file_slug(name, 'model')}-{identity}--{task}--{file_slug(data, 'data')}--L{budget}.jsonl"


def check_predictions_path(path: Path) -> None:
    """What lies at a predictions file's path is nothing or a predictions file a run can read and rewrite
    (not a folder, a FIFO, a device, a link leading nowhere, a file of the kernel's, another file): one
    line."""
    why = " is a folder" if path.is_dir() else (f" is {special}" if (special := special_file(path)) else None)
    if why is None and path.exists() and (kernel := kernel_filesystem(path)):
        why = f" is {kernel}"
    if why:
        raise PipelineError(
            f"predictions_dir={path.parent}: {path.name}{why}, not a predictions file: remove it, or pass "
            "predictions_dir=<another folder>"
        )
    check(Output("predictions_dir", path, PREDICTIONS))
