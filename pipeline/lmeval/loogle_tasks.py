"""LooGLE's tasks in lm-evaluation-harness: ``loogle_shortdep_qa``, ``loogle_longdep_qa`` (the embedded
sample), ``loogle_shortdep_cloze`` and ``loogle_longdep_summarization`` (the Hub dataset at its pinned
revision), tagged ``loogle``.

One engine, two shells: with the model ``longppl``, a request is answered by the generation of `make
loogle` (``pipeline.loogle.generation.answering.answer``: its prompt, the first-and-last-halves cut,
a document's questions decoded together, greedy with ``repetition_penalty=2.0`` per sequence and the
task's new tokens), and ``process_results`` scores it with
``pipeline.loogle.metrics.similarity``; the aggregations average as LooGLE does (the cloze matches pooled over
masks). BERTScore and the timeline-reorder deviations are `make loogle`'s only (docs/loogle.md).
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

import datasets
import lm_eval.api.metrics  # noqa: F401  (lm-eval's own metrics and aggregations, registered first)
import numpy as np
from lm_eval.api.instance import Instance
from lm_eval.api.registry import metric_registry, register_aggregation, register_metric
from lm_eval.api.task import ConfigurableTask
from tqdm.auto import tqdm

from pipeline.errors import PipelineError
from pipeline.loogle.data.prompts import max_new_tokens, prompt_for
from pipeline.loogle.data.questions import Question
from pipeline.loogle.data.reading import DataSource, load_questions
from pipeline.loogle.generation.answering import BATCH_SIZE, answer, check_batch_size, prompt_limit
from pipeline.loogle.generation.decoding import cut_prompt
from pipeline.loogle.metrics import similarity as metrics

MEAN, RATIO = "loogle_mean", "loogle_pooled_ratio"
SIMILARITY = ("bleu1", "bleu4", "rouge1", "rouge2", "rougeL", "meteor")
MATCH = ("exact_match", "partial_match")


@register_aggregation(MEAN)
def loogle_mean(items: list[float | None]) -> float | None:
    """The mean over questions (numpy's, as LooGLE's); None when the metric could not be computed."""
    return None if any(item is None for item in items) else float(np.mean(items))


@register_aggregation(RATIO)
def loogle_pooled_ratio(items: list[tuple[int, int]]) -> float:
    """Matched masks over all masks."""
    return float(np.sum([m for m, _ in items]) / np.sum([n for _, n in items]))


for _name in (*SIMILARITY, *MATCH):
    if _name not in metric_registry:
        register_metric(metric=_name, higher_is_better=True, aggregation=RATIO if _name in MATCH else MEAN)(
            lambda items: items
        )


def prompt_budget(value: Any) -> int | None:
    """``loogle_max_length`` (``--metadata`` or ``--gen_kwargs``), checked before the model runs: null
    (the model's context less the new tokens) or a whole number of tokens, at least 2."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 2):
        return value
    raise PipelineError(
        f"setting loogle_max_length={value!r}: the prompt's token budget is a whole number of at least 2, "
        "or null (the model's context less the new tokens)"
    )


def batch_budget(value: Any) -> int:
    """``loogle_batch_size`` (``--metadata`` or ``--gen_kwargs``), checked before the model runs: a
    whole number of questions, at least 1."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return check_batch_size(value)
    raise PipelineError(
        f"setting loogle_batch_size={value!r}: questions decoded together: a whole number, at least 1"
    )


def protocol_error(task: str, model: str) -> PipelineError:
    """The refusal of a LooGLE task run by a model other than ``longppl``, which alone follows LooGLE's
    protocol: naming the task, the model and the fix."""
    return PipelineError(
        f"task {task} follows LooGLE's protocol (its prompt cut to its first and last halves in tokens, "
        f"greedy decoding with repetition_penalty=2.0) only with --model longppl, not --model {model}, "
        "which would keep the prompt's last tokens, drop LooGLE's instruction and decode its own way: run "
        "it with --model longppl --model_args pretrained=<model> (in Python: LongPPLLM(<model>))"
    )


class LongPPLOnly(dict):  # type: ignore[type-arg]
    """A LooGLE request's generation options, which only the model ``longppl`` reads as they are
    (``answer_requests``). lm-eval's own models copy them first (``normalize_gen_kwargs``: ``hf``,
    ``vllm`` and the others), before they generate or truncate anything: that copy is refused in one
    line naming the task and ``--model longppl``."""

    def __init__(self, options: dict[str, Any], task: str) -> None:
        super().__init__(options)
        self.task = task

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        raise protocol_error(getattr(self, "task", "loogle_*"), "hf, vllm or another of lm-eval's own")


def question_of(doc: dict[str, Any]) -> Question:
    """A task document back as the question `make loogle` asks."""
    answer = json.loads(doc["answer"])
    return Question(doc["loogle_task"], doc["doc_id"], doc["index"], doc["context"], doc["question"], answer)


class LooGLETask(ConfigurableTask):
    """One LooGLE task (``metadata.loogle_task``; ``loogle_data``: sample, hub or a folder;
    ``loogle_max_length``: the prompt's token budget, `make loogle`'s ``max_length``;
    ``loogle_batch_size``: `make loogle`'s ``batch_size``; lm-eval's ``--metadata`` sets them)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        cfg = copy.deepcopy(config or {})
        cfg.pop("class", None)
        meta = cfg.setdefault("metadata", {})
        self.task = meta["loogle_task"]
        self.source = DataSource(str(meta.get("loogle_data", "sample")), revision=meta.get("loogle_revision"))
        names = SIMILARITY if self.task != "shortdep_cloze" else MATCH
        defaults = {
            "output_type": "generate_until",
            "test_split": "test",
            "doc_to_text": "",
            "doc_to_target": "answer",
            "generation_kwargs": {
                "until": [],
                "max_gen_toks": max_new_tokens()[self.task],
                "do_sample": False,
                # null: the context less the new tokens
                "loogle_max_length": prompt_budget(meta.get("loogle_max_length")),
                "loogle_batch_size": batch_budget(meta.get("loogle_batch_size", BATCH_SIZE)),
            },
            "metric_list": [
                {"metric": n, "aggregation": RATIO if n in MATCH else MEAN, "higher_is_better": True}
                for n in names
            ],
        }
        for key, value in defaults.items():
            cfg.setdefault(key, value)
        super().__init__(config=cfg)

    def download(self, *args: Any, **kwargs: Any) -> None:
        questions = load_questions(self.task, self.source)
        columns = {
            "loogle_task": [q.task for q in questions],
            "qid": [q.qid for q in questions],
            "doc_id": [q.doc_id for q in questions],
            "index": [q.index for q in questions],
            "context": [q.context for q in questions],
            "question": [q.question for q in questions],
            "answer": [json.dumps(q.answer, ensure_ascii=False) for q in questions],
        }
        self.dataset = datasets.DatasetDict({"test": datasets.Dataset.from_dict(columns)})

    def construct_requests(self, doc: dict[str, Any], ctx: Any, **kwargs: Any) -> Instance:
        """The request of one question: its LooGLE prompt (the model ``longppl`` cuts it in tokens)."""
        for key in ("apply_chat_template", "chat_template"):
            kwargs.pop(key, None)
        options = copy.deepcopy(self.config.generation_kwargs)
        prompt_budget(options.get("loogle_max_length"))  # --gen_kwargs may set them after the task is built
        batch_budget(options.get("loogle_batch_size", BATCH_SIZE))
        arguments = (prompt_for(question_of(doc)).text, LongPPLOnly(options, self.config.task))
        return Instance(request_type="generate_until", doc=doc, arguments=arguments, idx=0, **kwargs)

    def process_results(self, doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        (prediction,) = results
        answer = json.loads(doc["answer"])
        if self.task == "shortdep_cloze":
            return {
                "exact_match": metrics.exact_match(answer, prediction),
                "partial_match": metrics.partial_match(answer, prediction),
            }
        return metrics.similarity(answer, prediction, metrics.wordnet_problem() is None)


def answer_requests(lm: Any, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
    """The model's answers to LooGLE requests, by `make loogle`'s generation (``answering.answer``): the
    question's prompt cut to ``loogle_max_length`` tokens (null: the model's context less the new
    tokens), ``max_gen_toks`` new tokens, a document's questions decoded together in batches of
    ``loogle_batch_size``."""
    groups: dict[tuple[int, int, int], list[int]] = {}
    questions = [question_of(request.doc) for request in requests]
    for number, (request, question) in enumerate(zip(requests, questions, strict=True)):
        options = request.args[1]
        new_tokens = int(options.get("max_gen_toks") or max_new_tokens()[question.task])
        budget = prompt_limit(lm.context_length, options.get("loogle_max_length"), new_tokens, question.task)
        batch = batch_budget(options.get("loogle_batch_size", BATCH_SIZE))
        groups.setdefault((new_tokens, budget, batch), []).append(number)
    out: list[str] = [""] * len(requests)
    bar = tqdm(total=len(requests), desc="questions", unit="question", disable=disable_tqdm)
    for (new_tokens, budget, batch), numbers in groups.items():
        # each request its own question (index: its number), grouped by task and document
        keyed = [replace(questions[n], doc_id=f"{questions[n].task}/{questions[n].doc_id}", index=n)
                 for n in numbers]  # fmt: skip
        cuts = {q.qid: cut_prompt(lm.tokenizer, q, budget) for q in keyed}

        def done(question: Question, found: Any) -> None:
            out[question.index] = found.text
            bar.update(1)

        answer(lm, keyed, cuts, new_tokens, batch, done)
    bar.close()
    return out


def is_loogle(request: Any) -> bool:
    return isinstance(getattr(request, "doc", None), dict) and "loogle_task" in request.doc
