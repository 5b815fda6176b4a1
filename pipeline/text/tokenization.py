"""Tokenization with character offsets: every token's [start, end) characters in the exact text.

Character spans are the contract between tokenizers (the evaluator's and any evaluated model's), so a
tokenizer that does not reproduce the text exactly is an error here, never a silent misalignment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from pipeline.errors import PipelineError


@dataclass
class Encoding:
    """Token ids of a text (no special tokens) and each token's [start, end) character span."""

    ids: np.ndarray  # int64, shape (n,)
    offsets: np.ndarray  # int64, shape (n, 2)
    offsets_from: str  # "tokenizer" or "decode" (fallback for tokenizers without offset support)


def encode_with_offsets(tokenizer: Any, text: str) -> Encoding:
    """Tokenize ``text`` without special tokens and return character offsets for every token.

    Fast tokenizers give offsets directly. Others (the official package met this with Phi-3) get
    offsets from decoding: each token's length is the growth of the decoded text when it is added.
    Either way the tokenizer must reproduce the text exactly, or the error says so: spans computed
    on a text the tokenizer altered would silently point at the wrong characters.
    """
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = np.asarray(enc["input_ids"], dtype=np.int64)
        offsets = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
        source = "tokenizer"
    except (NotImplementedError, TypeError, ValueError):
        ids = np.asarray(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=np.int64)
        offsets = offsets_by_decoding(tokenizer, ids)
        source = "decode"
    check_reproduces_text(tokenizer, ids, text)
    if len(ids) and offsets[-1, 1] != len(text):
        name = getattr(tokenizer, "name_or_path", "")
        raise PipelineError(
            f"character offsets from decoding tokenizer '{name}' do not add up to the text "
            f"({offsets[-1, 1]} of {len(text)} characters; its tokens split characters into bytes): "
            "use the model's fast tokenizer, which reports offsets itself"
        )
    return Encoding(ids=ids, offsets=offsets, offsets_from=source)


def _decode(tokenizer: Any, ids: Any) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def offsets_by_decoding(tokenizer: Any, ids: np.ndarray) -> np.ndarray:
    """Character offsets from decoding pairs of tokens (for tokenizers that give no offsets).

    The length of token i is ``len(decode(ids[i-1:i+1])) - len(decode(ids[i-1:i]))``: decoding it
    after its predecessor keeps SentencePiece's leading space, which decoding it alone would drop.
    """
    lengths = np.empty(len(ids), dtype=np.int64)
    for i in range(len(ids)):
        if i == 0:
            lengths[i] = len(_decode(tokenizer, ids[:1]))
        else:
            lengths[i] = len(_decode(tokenizer, ids[i - 1 : i + 1])) - len(_decode(tokenizer, ids[i - 1 : i]))
    ends = np.cumsum(np.maximum(lengths, 0))
    starts = ends - np.maximum(lengths, 0)
    return np.stack([starts, ends], axis=1)


def check_reproduces_text(tokenizer: Any, ids: np.ndarray, text: str) -> None:
    decoded = _decode(tokenizer, ids)
    if decoded == text:
        return
    at = next(
        (i for i, (a, b) in enumerate(zip(decoded, text, strict=False)) if a != b),
        min(len(decoded), len(text)),
    )
    name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
    raise PipelineError(
        f"tokenizer '{name}' does not reproduce the text (it normalises it; first difference at "
        f"character {at}: {text[at : at + 12]!r} became {decoded[at : at + 12]!r}): character spans "
        "cannot be mapped onto its tokens; use a model whose tokenizer round-trips text"
    )


def encode_truncated(
    tokenizer: Any, text: str, max_tokens: int | None, encode: Callable[[str], Encoding] | None = None
) -> tuple[str, Encoding, bool]:
    """Encode ``text``; past ``max_tokens`` tokens, cut the text before the first dropped token and
    encode that prefix again, so that the stored tokens are exactly the prefix's own tokens.
    ``encode`` replaces ``encode_with_offsets(tokenizer, ...)`` (another route to the same tokens).

    Returns (the text kept, its encoding, whether it was truncated)."""
    encode = encode or partial(encode_with_offsets, tokenizer)
    enc = encode(text)
    truncated = False
    while max_tokens is not None and len(enc.ids) > max_tokens:
        truncated = True
        text = text[: int(enc.offsets[max_tokens, 0])]
        enc = encode(text)
    return text, enc, truncated
