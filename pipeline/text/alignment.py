"""Carry key tokens from the evaluator's tokenizer onto an evaluated model's tokens (paper App. A.1).

Positions are character offsets into one text (Python ``str`` indices, i.e. code points). A token
covers ``[start, end)``; offsets come as int arrays of shape (n, 2), sorted by start. Byte-fallback
tokens may share one span and some tokens have an empty span (``start == end``).
Key spans are the evaluator's key tokens merged (``pipeline.definition.merge_spans``): sorted and
disjoint. Everything is vectorised; nothing loops over tokens or characters in Python.
"""

from __future__ import annotations

import numpy as np


def _offsets(offsets: np.ndarray, name: str, n_chars: int | None = None) -> np.ndarray:
    """Validated int64 (n, 2) offsets with 0 <= start <= end (<= n_chars when given)."""
    arr = np.asarray(offsets, dtype=np.int64)
    if arr.size == 0:
        arr = arr.reshape(0, 2)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"{name} must have shape (n, 2), got {arr.shape}")
    if np.any(arr[:, 0] < 0) or np.any(arr[:, 0] > arr[:, 1]):
        raise ValueError(f"{name} must satisfy 0 <= start <= end for every token")
    if n_chars is not None and np.any(arr[:, 1] > n_chars):
        raise ValueError(f"{name} reach past the end of the text ({n_chars} characters)")
    return arr


def _spans(starts: np.ndarray, ends: np.ndarray, disjoint: bool) -> tuple[np.ndarray, np.ndarray]:
    """Validated int64 key spans: starts <= ends, sorted by start and end (and disjoint if asked)."""
    a = np.asarray(starts, dtype=np.int64).reshape(-1)
    b = np.asarray(ends, dtype=np.int64).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"span starts and ends differ in length ({a.size} vs {b.size})")
    if np.any(a > b) or np.any(np.diff(a) < 0) or np.any(np.diff(b) < 0):
        raise ValueError("key spans must have start <= end and be sorted (merge them first)")
    if disjoint and np.any(a[1:] < b[:-1]):
        raise ValueError("key spans overlap (merge them first)")
    return a, b


def hard_key_mask(token_offsets: np.ndarray, span_starts: np.ndarray, span_ends: np.ndarray) -> np.ndarray:
    """Key tokens of the evaluated model (paper Eq. 9): tokens whose text lies inside one key span.

    Token ``[s, e)`` is key iff ``a <= s and e <= b`` for a key span ``[a, b)``. This is the
    official ``longppl.cal_overlap`` two-pointer scan in closed form: its span pointer after token
    i is the running maximum of ``min(first span with a > s_i, first span with b >= e_i)``, so the
    mask equals cal_overlap (before its i-1 shift) on any token offsets, given sorted spans. For
    real tokenizations (starts and ends both non-decreasing) that scan is exactly the containment
    test above.

    Empty tokens (``s == e``), as in cal_overlap: key iff ``a <= s <= b`` for some span, both
    ends included, so an empty token right at a span's end (``s == b``) is key. They carry no text,
    so Eq. 9 does not decide them; matching cal_overlap keeps the key sets identical.
    """
    off = _offsets(token_offsets, "token_offsets")
    a, b = _spans(span_starts, span_ends, disjoint=False)
    if a.size == 0:
        return np.zeros(len(off), dtype=bool)
    s, e = off[:, 0], off[:, 1]
    first_after = np.searchsorted(a, s, side="right")  # spans from here start after s
    first_reaching = np.searchsorted(b, e, side="left")  # spans from here end at or after e
    j = np.maximum.accumulate(np.minimum(first_after, first_reaching))
    jc = np.minimum(j, a.size - 1)
    return (j < a.size) & (a[jc] <= s) & (e <= b[jc])


def _running_count(
    starts: np.ndarray, ends: np.ndarray, n: int, weights: np.ndarray | None = None
) -> np.ndarray:
    """Per position c < n, the sum of ``weights`` (or the count) of intervals covering c."""
    diff = np.bincount(starts, weights, minlength=n + 1) - np.bincount(ends, weights, minlength=n + 1)
    return np.cumsum(diff[:n])


def character_weights(eval_offsets: np.ndarray, eval_weights: np.ndarray, n_chars: int) -> np.ndarray:
    """Soft weight w(c) of each character: the mean weight of the evaluator tokens covering it.

    A character covered by a NaN-weight token (no short context), or by no token, is NaN. Singly
    covered characters get their token's weight exactly; multiply covered ones (byte fallback)
    the mean, from difference arrays.
    """
    off = _offsets(eval_offsets, "eval_offsets", n_chars)
    w = np.asarray(eval_weights, dtype=np.float64).reshape(-1)
    if w.shape != (len(off),):
        raise ValueError(f"eval_weights has {w.size} values for {len(off)} evaluator tokens")
    s, e = off[:, 0], off[:, 1]
    nan = np.isnan(w)
    count = _running_count(s, e, n_chars)
    n_nan = _running_count(s[nan], e[nan], n_chars)
    token = np.rint(_running_count(s, e, n_chars, np.arange(len(w), dtype=np.float64))).astype(np.int64)
    total = _running_count(s, e, n_chars, np.where(nan, 0.0, w))
    out = np.full(n_chars, np.nan)
    single = (count == 1) & (n_nan == 0)
    out[single] = w[token[single]]
    multi = (count > 1) & (n_nan == 0)
    out[multi] = total[multi] / count[multi]
    return out


def soft_weights(
    token_offsets: np.ndarray, eval_offsets: np.ndarray, eval_weights: np.ndarray, n_chars: int
) -> np.ndarray:
    """Soft weights of the evaluated tokens (paper Eq. 10): the mean of w(c) over their characters.

    NaN characters are ignored; a token with no non-NaN character, or an empty span, is NaN.
    A token whose characters all carry one value (e.g. it lies inside one evaluator token) gets
    that value exactly, so identical tokenizations return the evaluator weights unchanged.
    Returns float64 of length len(token_offsets).
    """
    off = _offsets(token_offsets, "token_offsets", n_chars)
    char_w = character_weights(eval_offsets, eval_weights, n_chars)
    s, e = off[:, 0], off[:, 1]
    out = np.full(len(off), np.nan)
    if n_chars == 0:
        return out
    valid = ~np.isnan(char_w)
    csum = np.concatenate(([0.0], np.cumsum(np.where(valid, char_w, 0.0))))
    ccount = np.concatenate(([0], np.cumsum(valid)))
    n_valid = ccount[e] - ccount[s]
    has = n_valid > 0
    out[has] = (csum[e[has]] - csum[s[has]]) / n_valid[has]
    # Runs of equal character weights: a token inside one run takes its value exactly.
    change = np.ones(n_chars, dtype=bool)
    change[1:] = char_w[1:] != char_w[:-1]
    run = np.cumsum(change)
    first, last = np.minimum(s, n_chars - 1), np.maximum(e - 1, 0)
    constant = (e > s) & (run[first] == run[last])
    out[constant] = char_w[first[constant]]
    return out


def _measure_below(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many characters of the disjoint sorted spans [a, b) lie below each x."""
    if a.size == 0:
        return np.zeros(len(x), dtype=np.int64)
    before = np.concatenate(([0], np.cumsum(b - a)))
    k = np.searchsorted(a, x, side="right") - 1  # last span starting at or before x
    kc = np.maximum(k, 0)
    return np.where(k >= 0, before[kc] + np.minimum(x, b[kc]) - a[kc], 0)


def covered_key_chars(
    token_offsets: np.ndarray, key_mask: np.ndarray, span_starts: np.ndarray, span_ends: np.ndarray
) -> tuple[int, int]:
    """(key characters, key characters inside evaluated key tokens).

    The first is the total length of the key spans; the second the size of their intersection
    with the union of the spans of the tokens marked in ``key_mask``.
    """
    off = _offsets(token_offsets, "token_offsets")
    mask = np.asarray(key_mask, dtype=bool).reshape(-1)
    if mask.shape != (len(off),):
        raise ValueError(f"key_mask has {mask.size} entries for {len(off)} tokens")
    a, b = _spans(span_starts, span_ends, disjoint=True)
    n_key = int(np.sum(b - a))
    sel = off[mask & (off[:, 1] > off[:, 0])]
    if len(sel) == 0:
        return n_key, 0
    sel = sel[np.argsort(sel[:, 0], kind="stable")]
    s, e = sel[:, 0], sel[:, 1]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    union_starts = s[new]
    union_ends = np.maximum.reduceat(e, np.flatnonzero(new))
    covered = _measure_below(union_ends, a, b) - _measure_below(union_starts, a, b)
    return n_key, int(np.sum(covered))
