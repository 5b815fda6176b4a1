"""LooGLE's greedy decoding, a document's questions at once: the prompt tokens they share computed once,
their answers decoded together in batches, with ``repetition_penalty=2.0`` applied to each sequence's
own tokens, as ``decoding.generate`` (transformers' ``generate``) decodes one question.

The questions of one document share their prompt's first tokens: the instruction and the whole text
when the prompt fits, the kept first half when it is cut (the question lies in the last half). Those
tokens' keys and values are computed once (``prefill``); each question then runs its own remaining
tokens on a copy of them, which the batch takes in at once (``stack``: each sequence left-padded to
the longest, the padding masked, each sequence at its own positions, so a sliding-window layer sees
the same keys as one question alone; a full-attention layer's keys and values go into an
``InPlaceLayer`` with room for the answers, written in place at each step rather than copied whole).
Every step then decodes one token of every unfinished question; a question that reaches an
end-of-text token leaves the batch and is handed back at once.

The same arithmetic in another order: the answers equal one-at-a-time decoding up to float rounding,
which can flip a greedy choice only where the two best tokens' scores nearly tie. Each answer records
its closest call (the step where the top two scores, after the penalty, were nearest, and their
margin), so such a flip can be told from a real difference.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from pipeline.loogle.generation.decoding import REPETITION_PENALTY, Cut
from pipeline.loogle.generation.inplace_cache import InPlaceLayer


@dataclass(frozen=True)
class Answer:
    """One question's answer: its new token ids (the end-of-text token included when reached), their
    text (special tokens skipped) and the closest greedy call: ``margin`` between the two best scores
    at new token ``step`` (0-based), the smallest of all steps."""

    ids: list[int]
    text: str
    step: int
    margin: float


def common_prefix(cuts: Sequence[Cut]) -> int:
    """How many first tokens every cut shares, leaving each at least one token of its own (whose
    logits give its first new token)."""
    first = cuts[0].ids
    limit = min(len(cut.ids) for cut in cuts) - 1
    n = 0
    while n < limit and all(cut.ids[n] == first[n] for cut in cuts):
        n += 1
    return n


def end_ids(model: Any, tokenizer: Any) -> set[int]:
    """The tokens that end an answer: the model's generation config's, as ``generate`` stops."""
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    return set() if eos is None else {int(e) for e in (eos if isinstance(eos, list) else [eos])}


def forward(model: Any, ids: list[int], cache: Any) -> torch.Tensor:
    """``ids`` after what ``cache`` holds (extended in place); the last position's logits in float32."""
    device = next(model.parameters()).device
    kwargs = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    out = model(input_ids=torch.tensor([ids], device=device), past_key_values=cache, use_cache=True, **kwargs)
    return out.logits[:, -1].to(dtype=torch.float32)


def prefill(model: Any, ids: list[int]) -> Any:
    """The keys and values of ``ids`` (a cache of the model's own layer kinds)."""
    cache = DynamicCache(config=model.config)
    if ids:
        forward(model, ids, cache)
    return cache


def stack(caches: Iterable[Any], size: int, width: int, room: int) -> Any:
    """One batch cache of ``size`` single-sequence caches of at most ``width`` tokens, each left-padded
    with zeros to the longest in every layer, taken in one at a time as ``caches`` yields them (a
    question's own cache is released as the batch takes it, so no two are held at once). A
    full-attention layer becomes an ``InPlaceLayer`` of ``width`` tokens with ``room`` positions for
    the new ones; a sliding-window layer's length becomes the batch's longest, as in a padded batch."""
    batch, full, sliding, total = None, {}, {}, 0
    for row, cache in enumerate(caches):
        batch, total = cache if batch is None else batch, max(total, cache.get_seq_length())
        for index, layer in enumerate(cache.layers):
            if type(layer) is not DynamicLayer:
                sliding.setdefault(index, []).append((layer.keys, layer.values))
            else:
                if index not in full:
                    full[index] = InPlaceLayer.empty((layer.keys, layer.values), size, width, room)
                full[index].place(row, layer.keys, layer.values)
            layer.keys = layer.values = None
    for index, layer in full.items():
        batch.layers[index] = layer
    for index, states in sliding.items():
        layer, longest = batch.layers[index], max(keys.shape[-2] for keys, _ in states)
        layer.keys = torch.cat([left_pad(keys, longest) for keys, _ in states])
        layer.values = torch.cat([left_pad(values, longest) for _, values in states])
        if hasattr(layer, "cumulative_length"):
            layer.cumulative_length = total
    return batch


def left_pad(states: torch.Tensor, width: int) -> torch.Tensor:
    missing = width - states.shape[-2]
    if missing == 0:
        return states
    pad = states.new_zeros((*states.shape[:-2], missing, states.shape[-1]))
    return torch.cat([pad, states], dim=-2)


def penalised(scores: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
    """transformers' repetition penalty, each row on its own tokens (``seen``: prompt and new tokens)."""
    penalty = torch.where(scores < 0, scores * REPETITION_PENALTY, scores / REPETITION_PENALTY)
    return torch.where(seen, penalty, scores)


def decode_batch(
    model: Any, tokenizer: Any, prefix: Any, cuts: list[Cut], shared: int, max_new_tokens: int,
    done: Callable[[int, Answer], None],
) -> None:  # fmt: skip
    """Greedy decoding of ``cuts`` (which share their first ``shared`` tokens, held by ``prefix``);
    ``done(i, answer)`` as each finishes."""
    first: list[torch.Tensor] = []

    def prefilled() -> Iterator[Any]:
        for cut in cuts:
            cache = copy.deepcopy(prefix)
            first.append(forward(model, cut.ids[shared:], cache))
            yield cache

    width = max(len(cut.ids) for cut in cuts)
    cache = stack(prefilled(), len(cuts), width, max_new_tokens)
    scores = torch.cat(first)
    device, ends = scores.device, end_ids(model, tokenizer)
    lengths = torch.tensor([len(cut.ids) for cut in cuts], device=device)
    mask = (torch.arange(width, device=device)[None] >= (width - lengths)[:, None]).long()
    seen = torch.zeros_like(scores, dtype=torch.bool)
    for row, cut in enumerate(cuts):
        seen[row, cut.ids] = True
    rows = list(range(len(cuts)))
    new: list[list[int]] = [[] for _ in cuts]
    closest = [(0, float("inf"))] * len(cuts)
    for step in range(max_new_tokens):
        scores = penalised(scores, seen)
        top = scores.topk(2, dim=-1).values
        tokens = scores.argmax(dim=-1)
        keep = []
        for i, (row, token) in enumerate(zip(rows, tokens.tolist(), strict=True)):
            margin = float(top[i, 0] - top[i, 1])
            closest[row] = min(closest[row], (step, margin), key=lambda c: c[1])
            new[row].append(token)
            if token in ends or step == max_new_tokens - 1:
                text = tokenizer.decode(new[row], skip_special_tokens=True)
                done(row, Answer(new[row], text, *closest[row]))
            else:
                keep.append(i)
        if not keep:
            return
        if len(keep) < len(rows):
            index = torch.tensor(keep, device=device)
            cache.batch_select_indices(index)
            tokens, mask, seen, lengths = tokens[index], mask[index], seen[index], lengths[index]
            rows = [rows[i] for i in keep]
        seen[torch.arange(len(rows), device=device), tokens] = True
        mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=1)
        positions = (lengths + step)[:, None]
        out = model(input_ids=tokens[:, None], attention_mask=mask, position_ids=positions,
                    past_key_values=cache, use_cache=True)  # fmt: skip
        scores = out.logits[:, -1].to(dtype=torch.float32)


def decode_document(
    model: Any, tokenizer: Any, cuts: list[Cut], max_new_tokens: int, batch_size: int,
    done: Callable[[int, Answer], None],
) -> None:  # fmt: skip
    """The answers to one document's questions (``cuts``, in order): their shared tokens computed
    once, then batches of ``batch_size``; ``done(i, answer)`` as each question finishes."""
    if not cuts:
        return
    shared = common_prefix(cuts)
    with torch.no_grad():
        prefix = prefill(model, cuts[0].ids[:shared])
        for start in range(0, len(cuts), batch_size):
            batch = cuts[start : start + batch_size]
            decode_batch(model, tokenizer, prefix, batch, shared, max_new_tokens,
                         lambda i, answer, start=start: done(start + i, answer))  # fmt: skip
