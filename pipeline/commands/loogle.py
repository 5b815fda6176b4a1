"""`make loogle MODEL=...`: ``python -m pipeline.commands.loogle [key=value ...]`` (Hydra overrides of
``conf/loogle.yaml``): LooGLE's tasks with its protocol for one model, a predictions file per task (a
killed run resumes it), then LooGLE's metrics of each, printed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pipeline.commands.shell import hydra_main, plain
from pipeline.errors import PipelineError
from pipeline.formats import file_slug
from pipeline.hub import offline_unless
from pipeline.loogle.data import SAMPLE_DIR, TASKS, Question, check_task
from pipeline.loogle.evaluate import evaluate, result_lines, source_of
from pipeline.loogle.run import RunSettings, check_prompts, new_tokens_for, predict_task, prompt_limit
from pipeline.loogle.scoring import bertscore_mode
from pipeline.loogle.sources import DataSource, fingerprint, load_questions
from pipeline.models.loading import ModelChoice, is_local_model
from pipeline.results import lines
from pipeline.results import loogle as loogle_results
from pipeline.results.loogle import loogle_row
from pipeline.results.scores import model_record
from pipeline.settings import Compute, parse


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


def run(cfg: Any) -> dict[str, Any]:
    values = plain(cfg)
    choice, compute, source = ModelChoice.parse(values["model"]), parse(Compute, values), source_of(values)
    mode = bertscore_mode(values["bertscore"])
    offline_unless(source.data == "hub", not is_local_model(choice.spec), mode == "true")
    questions = selected(str(values["task"]), source, values["limit"])
    new_tokens = {task: new_tokens_for(task, values["max_new_tokens"]) for task in questions}
    folder = lines.check_writable(Path(str(values["predictions_dir"])) / "x.jsonl", "predictions_dir").parent
    results_path = lines.check_writable(Path(str(values["results"])))
    choice.check()
    lm = choice.load(compute)
    plans = {}
    for task, task_questions in questions.items():  # every task's prompts checked before any generation
        budget = prompt_limit(lm.context_length, values["max_length"], new_tokens[task], task)
        fields = (source.label, fingerprint(task_questions), choice.display_name, budget, new_tokens[task])
        settings = RunSettings(task, *fields, values["limit"])
        name = file_slug(f"{choice.display_name}--{task}--{source.label}--L{budget}", task)
        check_prompts(lm.tokenizer, task_questions, budget)
        plans[task] = (settings, folder / f"{name}.jsonl")
    return {task: run_task(lm, questions[task], *plans[task], values, results_path) for task in plans}


def run_task(
    lm: Any, questions: list[Question], settings: RunSettings, path: Path, values: dict, results_path: Path
) -> dict[str, Any]:
    """One task: its predictions (resumed), its metrics, its results line; printed."""
    started = time.time()
    predict_task(lm, questions, settings, path, progress=bool(values["progress"]))
    result = evaluate(path, settings.task, source_of(values), bertscore_mode(values["bertscore"]))
    row = loogle_row(
        settings.model, model_record(lm, add_bos=True), result, settings.record(), time.time() - started
    )
    loogle_results.append(results_path, row)
    print("\n".join([*result_lines(result), f"predictions   {path}", f"appended to   {results_path}"]))
    return result


def main() -> None:
    hydra_main("loogle", run)


if __name__ == "__main__":
    main()
