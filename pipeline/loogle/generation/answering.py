"""One task of LooGLE for a loaded model: every question's prompt cut and checked first (a prompt that
cannot hold its question stops the run before anything is written), then each document's questions
decoded together (``answer``: ``batched.decode_document``), each prediction written as its question
finishes (the file rewritten whole and atomically), so a killed run resumes where it stopped.
``answer`` is the call both shells make (`make loogle` through ``predict_task``, the lm-eval tasks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from pipeline.errors import PipelineError
from pipeline.loogle.data.prompts import max_new_tokens as task_max_new_tokens
from pipeline.loogle.data.questions import Question
from pipeline.loogle.generation.batched import Answer, decode_document
from pipeline.loogle.generation.decoding import REPETITION_PENALTY, Cut, cut_prompt
from pipeline.loogle.generation.predictions import resumed, write_lines

BATCH_SIZE = 8  # questions of one document decoded together (conf/loogle.yaml; docs/loogle.md: measured)


@dataclass(frozen=True)
class RunSettings:
    """What a predictions file was made with: every line records it, and a resumed run must match it."""

    task: str
    data: str
    fingerprint: str
    model: str
    max_length: int
    max_new_tokens: int
    limit: int | None

    def record(self) -> dict[str, Any]:
        return {**self.__dict__, "repetition_penalty": REPETITION_PENALTY}


def prompt_limit(context_length: int | None, max_length: int | None, new_tokens: int, task: str) -> int:
    """The prompt's token budget: ``max_length`` when given, else the model's context less the task's
    new tokens (the whole sequence then fits the context the model was trained for)."""
    if max_length is not None:
        if max_length < 2:
            raise PipelineError(f"setting max_length={max_length}: at least 2 tokens")
        return max_length
    if context_length is None:
        raise PipelineError("the model's config does not say its context length: pass max_length=<tokens>")
    if context_length <= new_tokens + 1:
        raise PipelineError(
            f"the model's context ({context_length} tokens) leaves no room for a prompt before {task}'s "
            f"{new_tokens} new tokens: pass max_new_tokens= or max_length="
        )
    return context_length - new_tokens


def new_tokens_for(task: str, max_new_tokens: int | None) -> int:
    """LooGLE's generation length for the task, unless ``max_new_tokens`` is given."""
    if max_new_tokens is not None and max_new_tokens < 1:
        raise PipelineError(f"setting max_new_tokens={max_new_tokens}: at least 1")
    return max_new_tokens if max_new_tokens is not None else task_max_new_tokens()[task]


def check_batch_size(batch_size: int) -> int:
    """``batch_size`` (questions of one document decoded together), checked."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise PipelineError(f"setting batch_size={batch_size}: at least 1 question")
    return batch_size


def line_for(
    question: Question, settings: RunSettings, cut: Cut, answer: Answer, batch_size: int,
    model: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """A predictions line: the run's settings, the question, its prompt's cut and the prediction; how
    it was decoded (``batch_size``, new tokens, the closest greedy call) and what the model is
    (``model_record``: its identity, which `make loogle-metrics` keys its results line by) beside them."""
    return {
        **settings.record(),
        **({"model_record": model} if model is not None else {}),
        "doc_id": question.doc_id,
        "index": question.index,
        "qid": question.qid,
        "prompt_tokens": cut.prompt_tokens,
        "cut_tokens": cut.cut_tokens,
        "kept_tokens": len(cut.ids),
        "prediction": answer.text,
        "batch_size": batch_size,
        "new_tokens": len(answer.ids),
        "closest_call": {"step": answer.step, "margin": answer.margin},
    }


def check_prompts(tokenizer: Any, questions: list[Question], max_length: int) -> None:
    """Every question's prompt can be cut to ``max_length`` tokens keeping its question (else an error)."""
    for question in questions:
        cut_prompt(tokenizer, question, max_length)


def answer(
    lm: Any, questions: list[Question], cuts: dict[str, Cut], max_new_tokens: int, batch_size: int,
    done: Callable[[Question, Answer], None],
) -> None:  # fmt: skip
    """Every question answered, each document's questions together (in batches of ``batch_size``, their
    shared prompt tokens computed once); documents of one question (a summary) together, sharing
    their instruction; ``done(question, answer)`` as each finishes."""
    documents: dict[str, list[Question]] = {}
    for question in questions:
        documents.setdefault(question.doc_id, []).append(question)
    alone = [group[0] for group in documents.values() if len(group) == 1]
    groups = [group for group in documents.values() if len(group) > 1] + ([alone] if alone else [])
    for group in groups:
        decode_document(lm.model, lm.tokenizer, [cuts[q.qid] for q in group], max_new_tokens,
                        batch_size, lambda i, found, group=group: done(group[i], found))  # fmt: skip


def predict_task(
    lm: Any, questions: list[Question], settings: RunSettings, path: Path, batch_size: int = BATCH_SIZE,
    progress: bool = True, model: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """A prediction per question in ``path`` (resumed when it holds part of this run), each line with
    the model's record ``model``; its lines."""
    done = {row["qid"]: row for row in resumed(path, settings.record())}
    todo = [q for q in questions if q.qid not in done]
    cuts = {q.qid: cut_prompt(lm.tokenizer, q, settings.max_length) for q in todo}
    bar = tqdm(
        total=len(questions), initial=len(done), desc=settings.task, unit="question", disable=not progress
    )

    def finished(question: Question, found: Answer) -> None:
        done[question.qid] = line_for(question, settings, cuts[question.qid], found, batch_size, model)
        write_lines(path, [done[q.qid] for q in questions if q.qid in done])
        bar.update(1)

    answer(lm, todo, cuts, settings.max_new_tokens, batch_size, finished)
    bar.close()
    return [done[q.qid] for q in questions]
