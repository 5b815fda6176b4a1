"""The whole `make loogle` run for one loaded model: its typed settings (``LoogleOptions``), every task's
questions and prompts checked before any generation, then per task the predictions (resumed), LooGLE's
metrics and the results line, printed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pydantic.dataclasses

from pipeline.errors import PipelineError
from pipeline.formats import file_slug
from pipeline.hub import offline_unless
from pipeline.loogle.data.questions import SAMPLE_DIR, TASKS, Question, check_task
from pipeline.loogle.data.reading import DataSource, fingerprint, load_questions
from pipeline.loogle.generation.answering import (
    RunSettings,
    check_prompts,
    new_tokens_for,
    predict_task,
    prompt_limit,
)
from pipeline.loogle.metrics.evaluation import evaluate, result_lines
from pipeline.loogle.metrics.task_scores import bertscore_mode
from pipeline.models.loading import ModelChoice, is_local_model
from pipeline.results import lines
from pipeline.results import loogle as loogle_results
from pipeline.results.loogle import loogle_row
from pipeline.results.score import model_record
from pipeline.settings import Compute


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


def run_benchmark(choice: ModelChoice, compute: Compute, options: LoogleOptions) -> dict[str, Any]:
    """Every task's questions and prompts checked before any generation, then each task in turn."""
    source, mode = options.source, bertscore_mode(options.bertscore)
    offline_unless(source.data == "hub", not is_local_model(choice.spec), mode == "true")
    questions = selected(options.task, source, options.limit)
    new_tokens = {task: new_tokens_for(task, options.max_new_tokens) for task in questions}
    folder = lines.check_writable(Path(options.predictions_dir) / "x.jsonl", "predictions_dir").parent
    results_path = lines.check_writable(Path(options.results))
    choice.check()
    lm = choice.load(compute)
    plans = {}
    for task, task_questions in questions.items():  # every task's prompts checked before any generation
        budget = prompt_limit(lm.context_length, options.max_length, new_tokens[task], task)
        fields = (source.label, fingerprint(task_questions), choice.display_name, budget, new_tokens[task])
        settings = RunSettings(task, *fields, options.limit)
        name = file_slug(f"{choice.display_name}--{task}--{source.label}--L{budget}", task)
        check_prompts(lm.tokenizer, task_questions, budget)
        plans[task] = (settings, folder / f"{name}.jsonl")
    return {task: run_task(lm, questions[task], *plans[task], options, results_path) for task in plans}


def run_task(
    lm: Any,
    questions: list[Question],
    settings: RunSettings,
    path: Path,
    options: LoogleOptions,
    results_path: Path,
) -> dict[str, Any]:
    """One task: its predictions (resumed), its metrics, its results line; printed."""
    started = time.time()
    predict_task(lm, questions, settings, path, progress=options.progress)
    result = evaluate(path, settings.task, options.source, bertscore_mode(options.bertscore))
    row = loogle_row(
        settings.model, model_record(lm, add_bos=True), result, settings.record(), time.time() - started
    )
    loogle_results.append(results_path, row)
    print("\n".join([*result_lines(result), f"predictions   {path}", f"appended to   {results_path}"]))
    return result
