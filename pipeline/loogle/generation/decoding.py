"""LooGLE's protocol for an open model: the prompt cut to ``max_length`` tokens by keeping the first and
last halves of its tokens, then greedy decoding with ``repetition_penalty=2.0`` and the task's
``max_new_tokens``.

Where this differs from the repository (``Prediction/pred_opensource_models.py``): it decodes the two
halves to text and tokenizes that text again, so the cut prompt can have other tokens at the seam and
another length than ``max_length`` (re-tokenizing also adds the special tokens a second time); here the
kept token ids are the model's input as they are, exactly ``2 * (max_length // 2)`` of them. A cut that
would reach into the instruction before the text or the question after it is an error, not a prompt
without its question.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from pipeline.errors import PipelineError
from pipeline.loogle.data.prompts import Prompt, prompt_for
from pipeline.loogle.data.questions import Question

REPETITION_PENALTY = 2.0


class PromptTooLong(PipelineError):
    """Even the instruction and the question do not fit the token budget."""


@dataclass(frozen=True)
class Cut:
    """The prompt's token ids after the cut: ``prompt_tokens`` before it, ``cut_tokens`` removed from
    the middle (0: the whole prompt fits); ``kept_chars``: the character ranges ``[start, end)`` of the
    prompt the kept tokens cover (None: a tokenizer without offsets)."""

    ids: list[int]
    prompt_tokens: int
    cut_tokens: int
    kept_chars: tuple[tuple[int, int], ...] | None = None


def tokenize_prompt(tokenizer: Any, prompt: Prompt) -> tuple[list[int], list[tuple[int, int]] | None]:
    """The prompt's token ids as the repository tokenizes it (with the tokenizer's special tokens), and
    each token's character span where the tokenizer gives them."""
    if getattr(tokenizer, "is_fast", False):
        encoded = tokenizer(prompt.text, return_offsets_mapping=True)
        return list(encoded["input_ids"]), [tuple(span) for span in encoded["offset_mapping"]]
    return list(tokenizer(prompt.text)["input_ids"]), None


def cut_prompt(tokenizer: Any, question: Question, max_length: int) -> Cut:
    """The prompt of ``question`` within ``max_length`` tokens: whole, or its first and last halves."""
    return cut_to(tokenizer, prompt_for(question), max_length, f"{question.task} {question.qid}")


def cut_to(tokenizer: Any, prompt: Prompt, max_length: int, label: str) -> Cut:
    """``prompt`` within ``max_length`` tokens: whole, or its first and last halves (``label`` names it
    in the error when even its instruction and question do not fit)."""
    ids, spans = tokenize_prompt(tokenizer, prompt)
    if len(ids) <= max_length:
        return Cut(ids, len(ids), 0, None if spans is None else ((0, len(prompt.text)),))
    half = max_length // 2
    head_needed, tail_needed = framing_tokens(tokenizer, prompt, ids, spans)
    if head_needed > half or tail_needed > half:
        raise PromptTooLong(
            f"{label}: the prompt cannot fit even its instruction and question in "
            f"max_length={max_length} tokens (they need {head_needed} + {tail_needed} of the "
            f"{2 * half} kept): raise max_length"
        )
    kept = None
    if spans is not None:
        head_end = max((b for _, b in spans[:half]), default=0)
        tail_start = min((a for a, b in spans[len(ids) - half :] if b > a), default=len(prompt.text))
        kept = ((0, head_end), (tail_start, len(prompt.text)))
    return Cut(ids[:half] + ids[len(ids) - half :], len(ids), len(ids) - 2 * half, kept)


def framing_tokens(
    tokenizer: Any, prompt: Prompt, ids: list[int], spans: list[tuple[int, int]] | None
) -> tuple[int, int]:
    """How many tokens at the start hold the instruction (and special tokens) before the text, and how
    many at the end hold the question after it: what each kept half must at least cover."""
    if spans is not None:
        content = [i for i, (a, b) in enumerate(spans) if b > a]
        head = next((i for i in content if spans[i][1] > prompt.start), len(ids))
        tail = next((i for i in reversed(content) if spans[i][0] < prompt.end), -1)
        return head, len(ids) - 1 - tail
    head = len(tokenizer(prompt.text[: prompt.start])["input_ids"])
    tail = len(tokenizer(prompt.text[prompt.end :], add_special_tokens=False)["input_ids"])
    return head, tail


def generate(model: Any, tokenizer: Any, cut: Cut, max_new_tokens: int) -> str:
    """Greedy decoding of the cut prompt, one question alone, as the repository calls ``generate``; the
    new tokens decoded without special tokens."""
    ids, _ = generate_ids(model, tokenizer, cut, max_new_tokens)
    return tokenizer.decode(ids, skip_special_tokens=True)


def generate_ids(
    model: Any, tokenizer: Any, cut: Cut, max_new_tokens: int, margins: bool = False
) -> tuple[list[int], list[float]]:
    """The new token ids of ``generate`` (transformers' ``generate``: greedy, one beam,
    ``repetition_penalty``), and with ``margins`` each step's top-two score margin after the penalty
    (what a float rounding must overcome to flip that greedy choice)."""
    device = next(model.parameters()).device
    input_ids = torch.tensor([cut.ids], device=device)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    with torch.no_grad():
        output = model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            num_beams=1,
            repetition_penalty=REPETITION_PENALTY,
            pad_token_id=pad,
            return_dict_in_generate=margins,
            output_scores=margins,
        )
    if not margins:
        return output[0][len(cut.ids) :].tolist(), []
    steps = [scores[0].topk(2).values for scores in output.scores]
    return output.sequences[0][len(cut.ids) :].tolist(), [float(top[0] - top[1]) for top in steps]
