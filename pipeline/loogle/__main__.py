"""`make loogle MODEL=...`: ``python -m pipeline.loogle [key=value ...]`` (Hydra overrides of
``conf/loogle.yaml``): LooGLE's tasks with its protocol for one model, a predictions file per task (a
killed run resumes it), then LooGLE's metrics of each, printed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from pipeline.cli import hydra_main
from pipeline.errors import PipelineError
from pipeline.formats import file_slug
from pipeline.hub import offline_unless
from pipeline.loogle.data import SAMPLE_DIR, TASKS, Question, check_task
from pipeline.loogle.evaluate import evaluate, result_lines, source_of
from pipeline.loogle.run import RunSettings, new_tokens_for, predict_task, prompt_limit
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
    plain = OmegaConf.to_container(cfg, resolve=True)
    choice, compute, source = ModelChoice.parse(plain["model"]), parse(Compute, plain), source_of(plain)
    mode = bertscore_mode(plain["bertscore"])
    offline_unless(source.data == "hub", not is_local_model(choice.spec), mode == "true")
    questions = selected(str(plain["task"]), source, plain["limit"])
    folder = lines.check_writable(Path(str(plain["predictions_dir"])) / "x.jsonl", "predictions_dir").parent
    results_path = lines.check_writable(Path(str(plain["results"])))
    choice.check()
    lm = choice.load(compute)
    model = model_record(lm, add_bos=True)
    results = {}
    for task, task_questions in questions.items():
        started = time.time()
        new_tokens = new_tokens_for(task, plain["max_new_tokens"])
        budget = prompt_limit(lm.context_length, plain["max_length"], new_tokens, task)
        settings = RunSettings(
            task,
            source.label,
            fingerprint(task_questions),
            choice.display_name,
            budget,
            new_tokens,
            plain["limit"],
        )
        name = f"{choice.display_name}--{task}--{source.label}--L{budget}"
        path = folder / f"{file_slug(name, task)}.jsonl"
        predict_task(lm, task_questions, settings, path, progress=bool(plain["progress"]))
        results[task] = evaluate(path, task, source, mode)
        row = loogle_row(choice.display_name, model, results[task], settings.record(), time.time() - started)
        loogle_results.append(results_path, row)
        print(
            "\n".join(
                [*result_lines(results[task]), f"predictions   {path}", f"appended to   {results_path}"]
            )
        )
    return results


def main() -> None:
    hydra_main("loogle", run)


if __name__ == "__main__":
    main()
