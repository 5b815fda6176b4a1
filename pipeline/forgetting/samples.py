"""What the forgetting curve feeds a model (Liu et al., EMNLP 2024, Sec. 3-4; reference code
1azybug/ForgettingCurve): the grid of test lengths, the special tokens, the text, the seeded
samples of S and I, the copy and LM inputs and the positions scored. No model runs here.

L counts the tokens of S (the copy distance, the reference's ``length``): an input
``[bos] S [bos] S [eos]`` has 2L + 3 tokens (2L + 2 for a model without EOS).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pipeline.errors import PipelineError
from pipeline.text.tokenization import encode_with_offsets

GRIDS = ("linear", "log")
SOURCES = ("corpus", "random")


@dataclass(frozen=True)
class Sample:
    target: np.ndarray  # S, L token ids
    irrelevant: np.ndarray  # I, L token ids
    start: int | None  # where S starts in the corpus tokens (None: random tokens)


# ----------------------------------------------------------------------------------------------
# Grid, special tokens, text


def grid_lengths(grid: str, n: int, max_length: int, min_length: int = 8) -> list[int]:
    """The test lengths: linear ``max*k//n`` for k = 1..n (the paper's l/n, 2l/n, ..., l) or ``n``
    log-spaced lengths from ``min_length`` to ``max`` as the reference computes them,
    ``np.geomspace(min, max, n, dtype=int)``: the points truncated to integers (8, 15, 31, 63, ...,
    1023, 2047, 4094 for 8 to 4094, n = 10), so curves compare point by point with its published
    ones; duplicates are dropped (the reference's ``np.unique``). n = 1 is ``max`` alone."""
    if grid not in GRIDS:
        raise PipelineError(f"grid={grid!r}: use linear or log")
    if n < 1:
        raise PipelineError(f"n must be at least 1 test length (got n={n})")
    if max_length < 1:
        raise PipelineError(f"max_length must be at least 1 token (got {max_length})")
    if grid == "linear":
        lengths = [max_length * k // n for k in range(1, n + 1)]
    else:
        low = min(max(1, min_length), max_length)
        points = np.geomspace(low, max_length, num=n, dtype=int) if n > 1 else np.array([max_length])
        lengths = points.tolist()
    return sorted({x for x in lengths if x >= 1})


def input_tokens(length: int, has_eos: bool) -> int:
    """Tokens in ``[bos] S [bos] S [eos]`` for an S of ``length`` tokens."""
    return 2 * length + 2 + int(has_eos)


def resolve_max_length(value: Any, context: int, max_input: int | None, has_eos: bool) -> int:
    """``fit``: the largest L whose input fits min(context, max_input); ``context``: L = the claimed
    context (the paper's grid, inputs up to twice the context); or a number of tokens."""
    if value == "fit":
        limit = context if max_input is None else min(context, int(max_input))
        return max(1, (limit - input_tokens(0, has_eos)) // 2)
    if value == "context":
        return context
    if isinstance(value, bool) or not isinstance(value, int):
        raise PipelineError(f"max_length={value!r}: give a number of tokens, fit or context")
    return value


def special_tokens(tokenizer: Any, bos_id: int | None, eos_id: int | None) -> dict[str, Any]:
    """The BOS and EOS ids an input uses and where they come from: the setting, the model's
    tokenizer, or (no BOS) its EOS as a substitute."""
    out: dict[str, Any] = {"eos_token_id": tokenizer.eos_token_id, "eos_from": "tokenizer"}
    if eos_id is not None:
        out.update(eos_token_id=int(eos_id), eos_from="setting")
    if bos_id is not None:
        return {**out, "bos_token_id": int(bos_id), "bos_from": "setting"}
    if tokenizer.bos_token_id is not None:
        return {**out, "bos_token_id": tokenizer.bos_token_id, "bos_from": "tokenizer"}
    if out["eos_token_id"] is not None:
        return {**out, "bos_token_id": out["eos_token_id"], "bos_from": "eos (the model has no BOS)"}
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    raise PipelineError(
        f"model '{name}' has neither a BOS nor an EOS token to separate the copies: "
        "pass bos_id=<token id> (a document-separator token of its tokenizer)"
    )


def corpus_tokens(docs: list[Any], tokenizer: Any) -> np.ndarray:
    """Every document tokenized on its own (no special tokens), concatenated in corpus order."""
    parts = [encode_with_offsets(tokenizer, doc.text).ids for doc in docs]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def ordinary_token_ids(tokenizer: Any, vocab_size: int) -> np.ndarray:
    """Token ids below the model's vocabulary size that are not special tokens."""
    size = min(len(tokenizer), vocab_size)
    special = {i for i in tokenizer.all_special_ids if i is not None}
    return np.array([i for i in range(size) if i not in special], dtype=np.int64)


def check_corpus_length(n_tokens: int, longest: int, where: str) -> None:
    if n_tokens < 3 * longest:
        raise PipelineError(
            f"{where} has {n_tokens} tokens, too few for the largest length L={longest}: S (L tokens) "
            f"is drawn from the first N-2L tokens and I is the last L, so it needs at least 3L = "
            f"{3 * longest} tokens; lower max_length or use a longer corpus (corpus=local corpus.path=...)"
        )


def draw_samples(source: np.ndarray, length: int, R: int, seed: int, kind: str) -> list[Sample]:
    """R samples of length L: ``source`` is the corpus tokens (kind ``corpus``) or the ordinary
    token ids (kind ``random``)."""
    rng = np.random.default_rng([seed, length])
    if kind == "random":
        return [
            Sample(rng.choice(source, size=length), rng.choice(source, size=length), None) for _ in range(R)
        ]
    check_corpus_length(len(source), length, "the corpus")
    irrelevant = source[len(source) - length :]
    starts = rng.integers(0, len(source) - 3 * length, size=R, endpoint=True)
    return [Sample(source[s : s + length], irrelevant, int(s)) for s in starts]


def build_input(prefix: np.ndarray, target: np.ndarray, bos: int, eos: int | None) -> torch.Tensor:
    """``[bos] prefix [bos] target [eos]`` (no EOS when the model has none)."""
    tail = [] if eos is None else [eos]
    return torch.as_tensor(np.concatenate([[bos], prefix, [bos], target, tail]), dtype=torch.long)


def scored_positions(length: int) -> np.ndarray:
    """Indices, in an input, of the tokens scored: the last ceil(L/2) tokens of the second S
    (the reference's ``[-L//2:]``)."""
    end = 2 * length + 2  # one past the second S
    return np.arange(end - (length + 1) // 2, end)
