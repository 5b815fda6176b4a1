"""The LooGLE job (`make loogle`): LooGLE's tasks with its protocol for one model, every task's questions
and prompts checked before any generation, then per task its predictions file (a killed run resumes
it), LooGLE's metrics and its results line (``loogle.jsonl``, ``pipeline.results.loogle``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic.dataclasses

from pipeline.errors import PipelineError
from pipeline.formats import file_slug
from pipeline.jobs.recipe import JobResult, ModelInput, Record
from pipeline.loogle.data.questions import SAMPLE_DIR, TASKS, Question, check_task
from pipeline.loogle.data.reading import DataSource, fingerprint, load_questions
from pipeline.loogle.generation.answering import (
    RunSettings,
    check_batch_size,
    check_prompts,
    new_tokens_for,
    predict_task,
    prompt_limit,
)
from pipeline.loogle.metrics.evaluation import evaluate
from pipeline.loogle.metrics.reorder import check_timeline
from pipeline.loogle.metrics.task_scores import bertscore_mode
from pipeline.models.loading import LoadedModel, ModelChoice
from pipeline.models.logprobs import TargetScorer
from pipeline.results import loogle as loogle_lines
from pipeline.results.loogle import loogle_row
from pipeline.results.score import model_record
from pipeline.settings import Compute, parse, parse_group


@pydantic.dataclasses.dataclass(frozen=True)
class LoogleOptions:
    """``conf/loogle.yaml``'s own settings (the model and compute settings are their own types). The
    limit, the lengths and ``bertscore`` are checked where they are used, each with its own message."""

    task: str
    data: str
    dataset: str
    revision: str | None
    max_length: int | None
    max_new_tokens: int | None
    limit: int | None
    batch_size: int
    predictions_dir: str
    results: str
    bertscore: str | bool
    progress: bool

    @property
    def source(self) -> DataSource:
        return DataSource(self.data, self.dataset, self.revision)


def selected(task: str, source: DataSource, limit: int | None) -> dict[str, list[Question]]:
    """Each task's questions (its first ``limit``), loaded and checked before any model loads; task=all
    on the sample: the tasks the sample has."""
    if limit is not None and limit < 1:
        raise PipelineError(f"setting limit={limit}: at least 1 question, or null for all")
    tasks = TASKS if task == "all" else (check_task(task),)
    if task == "all" and source.data == "sample":
        tasks = tuple(t for t in TASKS if (SAMPLE_DIR / f"{t}.jsonl").is_file())
        print(
            f"note: the embedded sample has {', '.join(tasks)} only (data/loogle/README.md); "
            "data=hub has all four"
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
class LoogleJob:
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

    def outputs(self) -> dict[str, Path]:
        return {"predictions_dir": Path(self.options.predictions_dir) / "x.jsonl"}

    def needs_hub(self) -> bool:
        return self.options.source.data == "hub" or bertscore_mode(self.options.bertscore) == "true"

    def open(self) -> dict[str, list[Question]]:
        """Each task's questions and generation length, checked before the model loads."""
        check_batch_size(self.options.batch_size)
        questions = selected(self.options.task, self.options.source, self.options.limit)
        for task, task_questions in questions.items():
            new_tokens_for(task, self.options.max_new_tokens)
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
        plans = {task: self.plan(lm, task, task_questions) for task, task_questions in questions.items()}
        results = {}
        for task, (settings, path) in plans.items():
            clock, model = Clock(), model_record(lm, add_bos=True)
            predict_task(lm, questions[task], settings, path, self.options.batch_size, self.options.progress,
                         model)  # fmt: skip
            result = evaluate(path, task, self.options.source, bertscore_mode(self.options.bertscore))
            row = loogle_row(settings.model, model, result, settings.record(), clock.wall(), clock.cpu())
            record({**row, "batch_size": self.options.batch_size})
            results[task] = {**result, "wall_seconds": row["wall_seconds"], "cpu_seconds": row["cpu_seconds"]}
        return JobResult(results)

    def plan(self, lm: LoadedModel, task: str, questions: list[Question]) -> tuple[RunSettings, Path]:
        """The task's run settings and predictions file; every prompt checked to fit its budget."""
        options, name = self.options, self.model.display_name
        new_tokens = new_tokens_for(task, options.max_new_tokens)
        budget = prompt_limit(lm.context_length, options.max_length, new_tokens, task)
        fields = (options.source.label, fingerprint(questions), name, budget, new_tokens)
        settings = RunSettings(task, *fields, options.limit)
        check_prompts(lm.tokenizer, questions, budget)
        stem = file_slug(f"{name}--{task}--{options.source.label}--L{budget}", task)
        return settings, Path(options.predictions_dir) / f"{stem}.jsonl"
