"""Bits per byte: a tokenizer-independent form of PPL and LongPPL (as lm-eval-harness reports it).

Per-token perplexities of models with different vocabularies are not comparable: a model whose
tokens are longer predicts fewer, harder tokens. Bits per byte divides the same negative
log-likelihood, in bits, by the UTF-8 bytes of the characters those tokens spell:

    bits per byte = sum over the tokens of -log2 P(token | context) / UTF-8 bytes of their characters

and the corpus value is the sum of bits over the sum of bytes of all documents.

- **All text** (``bpb``): every scored token; its characters are the text from its first scored
  character (the start of the text when every token is scored, as with the BOS the score stage
  prepends) to the end of the last scored token: the whole document, or the prefix that fits a
  truncated one. lm-eval-harness's ``bits_per_byte`` of a document is this value.
- **Key characters** (``key_bpb``): the evaluated model's key tokens, the very tokens LongPPL
  averages over (those whose characters lie inside a key span of the artifact), and the characters
  they cover (the union of their spans, so that byte-fallback tokens sharing a character count it
  once). Key-span characters that no key token covers (a token straddling a span's edge is not key)
  are in neither the numerator nor the denominator: the result's ``key_char_coverage`` says how
  many there are. Dividing the key tokens' bits by all key-span bytes instead would mix tokens and
  characters that do not match, by a tokenizer-dependent amount.
"""

from __future__ import annotations

import numpy as np


def utf8_lengths(text: str) -> np.ndarray:
    """The UTF-8 length (1-4 bytes) of each character (code point) of ``text``, as int64."""
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4").astype(np.int64)
    return 1 + (points >= 0x80) + (points >= 0x800) + (points >= 0x10000)


def text_bytes(lengths: np.ndarray, offsets: np.ndarray, scored: np.ndarray) -> int:
    """UTF-8 bytes of the characters the scored tokens predict: from the start of the text (when the
    first token is scored, else the first scored token's start) to the end of the last scored token."""
    if not scored.any():
        return 0
    index = np.flatnonzero(scored)
    start = 0 if scored[0] else int(offsets[index[0], 0])
    return int(lengths[start : int(offsets[index[-1], 1])].sum())


def covered_bytes(lengths: np.ndarray, offsets: np.ndarray) -> int:
    """UTF-8 bytes of the union of the character spans ``offsets`` ([start, end), n x 2)."""
    if len(offsets) == 0:
        return 0
    n = len(lengths)
    depth = np.cumsum(
        np.bincount(offsets[:, 0], minlength=n + 1) - np.bincount(offsets[:, 1], minlength=n + 1)
    )
    return int(lengths[depth[:n] > 0].sum())
