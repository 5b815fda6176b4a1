"""Tests for pipeline.text.alignment: key spans and soft weights carried across tokenizers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.definition import merge_spans
from pipeline.text.alignment import character_weights, covered_key_chars, hard_key_mask, soft_weights

official = pytest.importorskip("longppl.longppl")

SETTINGS = settings(max_examples=200, deadline=None)
NAN = np.nan


def off(*pairs: tuple[int, int]) -> np.ndarray:
    return np.array(pairs, dtype=np.int64).reshape(-1, 2)


def spans(*pairs: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    arr = off(*pairs)
    return arr[:, 0], arr[:, 1]


def official_mask(offsets: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """cal_overlap's selection, undoing its i-1 shift."""
    picked = official.cal_overlap(offsets.tolist(), list(zip(starts.tolist(), ends.tolist(), strict=True)))
    mask = np.zeros(len(offsets), dtype=bool)
    mask[np.asarray(picked, dtype=np.int64) + 1] = True
    return mask


def key(offsets: np.ndarray, *pairs: tuple[int, int]) -> list[int]:
    """Indices hard_key_mask selects, checked against cal_overlap on the way."""
    a, b = spans(*pairs)
    mask = hard_key_mask(offsets, a, b)
    np.testing.assert_array_equal(mask, official_mask(offsets, a, b))
    return np.flatnonzero(mask).tolist()


def contiguous(lengths: list[int]) -> np.ndarray:
    ends = np.cumsum(lengths, dtype=np.int64)
    return np.stack([ends - np.asarray(lengths, dtype=np.int64), ends], axis=1)


# ---------------------------------------------------------------- hard key mask, hand-made

TEXT = "Hello, world! 😀 ok"  # the emoji is the single code point 14
TOKENS = off((0, 5), (5, 6), (6, 12), (12, 13), (13, 14), (14, 15), (14, 15), (14, 15), (15, 18))


def test_text_layout() -> None:
    assert TEXT[6:12] == " world" and TEXT[14] == "😀" and len(TEXT) == 18


def test_straddling_token_is_not_key() -> None:
    assert key(TOKENS, (3, 10)) == [1]  # "Hello" and " world" stick out
    assert key(TOKENS, (5, 9)) == [1]
    assert key(TOKENS, (0, 4)) == []


def test_whitespace_prefixed_token() -> None:
    assert key(TOKENS, (7, 12)) == []  # " world" starts one character before the span
    assert key(TOKENS, (6, 12)) == [2]
    assert key(TOKENS, (5, 13)) == [1, 2, 3]


def test_byte_fallback_tokens_share_a_span() -> None:
    assert key(TOKENS, (14, 15)) == [5, 6, 7]
    assert key(TOKENS, (13, 15)) == [4, 5, 6, 7]
    assert key(TOKENS, (15, 18)) == [8]
    assert key(TOKENS, (14, 18)) == [5, 6, 7, 8]


def test_multi_code_point_emoji() -> None:
    text = "a 👩\u200d👩\u200d👧 b"
    assert len(text) == 9 and text[2:7] == "👩\u200d👩\u200d👧"
    # byte fallback: 4, 3, 4, 3, 4 byte tokens per code point
    per_cp = [(c, c + 1) for c, n in zip(range(2, 7), (4, 3, 4, 3, 4), strict=True) for _ in range(n)]
    tokens = off((0, 1), (1, 2), *per_cp, (7, 9))
    assert key(tokens, (2, 7)) == list(range(2, 20))
    assert key(tokens, (2, 4)) == list(range(2, 9))  # first woman and the joiner after her
    assert key(tokens, (1, 7), (8, 9)) == list(range(1, 20))
    merged = off((0, 1), (1, 3), (3, 7), (7, 9))  # a token " 👩" straddles the emoji's span
    assert key(merged, (2, 7)) == [2]
    assert key(merged, (1, 7)) == [1, 2]


def test_empty_tokens_follow_cal_overlap() -> None:
    tokens = off((0, 0), (0, 3), (3, 5), (5, 5), (5, 8), (8, 8), (8, 10))
    assert key(tokens, (0, 3)) == [0, 1]  # BOS-like (0, 0) at a span's start
    assert key(tokens, (3, 5)) == [2, 3]  # empty token at the span's end is key
    assert key(tokens, (5, 8)) == [3, 4, 5]  # ... and at its start
    assert key(tokens, (6, 8)) == [5]
    assert key(tokens, (8, 10)) == [5, 6]
    assert key(tokens, (1, 2)) == []


def test_spans_at_text_start_and_end() -> None:
    assert key(TOKENS, (0, 5)) == [0]
    assert key(TOKENS, (0, 18)) == list(range(9))
    assert key(TOKENS, (0, 1), (15, 18)) == [8]
    assert key(TOKENS, (0, 6), (16, 18)) == [0, 1]


def test_no_spans_or_no_tokens() -> None:
    assert key(TOKENS) == []
    assert key(off(), (0, 3)) == []
    assert hard_key_mask(off(), *spans()).dtype == bool


def test_invalid_inputs_raise() -> None:
    with pytest.raises(ValueError):
        hard_key_mask(np.zeros((3, 3)), *spans((0, 1)))
    with pytest.raises(ValueError):
        hard_key_mask(off((2, 1)), *spans((0, 1)))
    with pytest.raises(ValueError):
        hard_key_mask(TOKENS, *spans((5, 8), (0, 3)))
    with pytest.raises(ValueError):
        soft_weights(off((0, 5)), off((0, 2)), [1.0], 4)
    with pytest.raises(ValueError):
        soft_weights(off((0, 2)), off((0, 2)), [1.0, 2.0], 4)
    with pytest.raises(ValueError):
        covered_key_chars(TOKENS, np.zeros(9, bool), *spans((0, 5), (3, 8)))
    with pytest.raises(ValueError):
        covered_key_chars(TOKENS, np.zeros(8, bool), *spans((0, 5)))


# ---------------------------------------------------------------- soft weights, hand-made


def test_soft_weights_string_level_average() -> None:
    ev, w = off((0, 2), (2, 4)), [1.0, 3.0]  # "ab" weight 1, "cd" weight 3
    got = soft_weights(off((1, 3), (0, 4), (0, 1), (0, 3), (2, 4)), ev, w, 4)
    np.testing.assert_allclose(got, [2.0, 2.0, 1.0, 5.0 / 3.0, 3.0], rtol=1e-15)
    assert got.dtype == np.float64


def test_soft_weights_nan_handling() -> None:
    ev = off((0, 2), (2, 4))
    got = soft_weights(off((1, 3), (0, 2), (2, 2), (0, 4)), ev, [NAN, 3.0], 4)
    np.testing.assert_array_equal(got, [3.0, NAN, NAN, 3.0])
    # characters no evaluator token covers are NaN as well
    got = soft_weights(off((2, 4), (1, 3), (4, 4)), off((0, 2)), [1.0], 4)
    np.testing.assert_array_equal(got, [NAN, 1.0, NAN])


def test_soft_weights_byte_fallback_evaluator() -> None:
    ev = off((0, 1), (1, 2), (1, 2), (1, 2))
    np.testing.assert_array_equal(character_weights(ev, [1.0, 1.0, 2.0, 6.0], 2), [1.0, 3.0])
    np.testing.assert_array_equal(soft_weights(off((0, 2)), ev, [1.0, 1.0, 2.0, 6.0], 2), [2.0])
    # one NaN byte token makes the whole character NaN
    np.testing.assert_array_equal(character_weights(ev, [1.0, 1.0, NAN, 6.0], 2), [1.0, NAN])
    np.testing.assert_array_equal(soft_weights(off((0, 2)), ev, [1.0, 1.0, NAN, 6.0], 2), [1.0])


def test_soft_weights_partially_overlapping_evaluator_tokens() -> None:
    # byte-level BPE can give (0, 2) and (1, 3) when a token ends inside character 1
    np.testing.assert_array_equal(character_weights(off((0, 2), (1, 3)), [2.0, 4.0], 3), [2.0, 3.0, 4.0])
    np.testing.assert_array_equal(soft_weights(off((0, 3)), off((0, 2), (1, 3)), [2.0, 4.0], 3), [3.0])


def test_soft_weights_empty_text() -> None:
    np.testing.assert_array_equal(soft_weights(off((0, 0)), off(), [], 0), [NAN])
    assert soft_weights(off(), off((0, 2)), [1.0], 2).shape == (0,)


# ---------------------------------------------------------------- covered key characters


def test_covered_key_chars_hand_made() -> None:
    a, b = spans((6, 12), (14, 18))
    mask = hard_key_mask(TOKENS, a, b)
    assert covered_key_chars(TOKENS, mask, a, b) == (10, 10)
    a, b = spans((7, 12), (14, 16))
    mask = hard_key_mask(TOKENS, a, b)  # only the byte tokens fit; " world" and " ok" straddle
    assert covered_key_chars(TOKENS, mask, a, b) == (7, 1)
    assert covered_key_chars(TOKENS, np.ones(9, bool), a, b) == (7, 7)
    assert covered_key_chars(TOKENS, np.zeros(9, bool), *spans()) == (0, 0)


# ---------------------------------------------------------------- properties


@st.composite
def tokenization(draw, max_tokens: int = 30, max_len: int = 4) -> list[int]:
    return draw(st.lists(st.integers(1, max_len), min_size=1, max_size=max_tokens))


@st.composite
def messy_offsets(draw, n_chars: int) -> np.ndarray:
    """Contiguous tokens with empty tokens and byte-fallback duplicates mixed in."""
    cuts = sorted(set(draw(st.lists(st.integers(0, n_chars), max_size=n_chars + 1))) | {0, n_chars})
    rows: list[tuple[int, int]] = []
    for lo, hi in itertools.pairwise(cuts):
        rows += [(lo, lo)] * draw(st.integers(0, 1))
        rows += [(lo, hi)] * draw(st.integers(1, 3))
    rows += [(n_chars, n_chars)] * draw(st.integers(0, 1))
    return off(*rows)


@SETTINGS
@given(data=st.data())
def test_identical_tokenizations_are_identity(data: st.DataObject) -> None:
    lengths = data.draw(tokenization())
    offsets = contiguous(lengths)
    n = len(lengths)
    subset = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    weights = np.array(
        data.draw(
            st.lists(st.one_of(st.floats(0.0, 1e3, allow_nan=False), st.just(NAN)), min_size=n, max_size=n)
        )
    )
    a, b, _ = merge_spans(offsets[subset, 0], offsets[subset, 1])
    np.testing.assert_array_equal(hard_key_mask(offsets, a, b), subset)
    n_chars = int(offsets[-1, 1])
    np.testing.assert_array_equal(soft_weights(offsets, offsets, weights, n_chars), weights)
    n_key = int(np.sum(np.asarray(lengths)[subset]))
    assert covered_key_chars(offsets, subset, a, b) == (n_key, n_key)


@SETTINGS
@given(data=st.data())
def test_matches_official_cal_overlap(data: st.DataObject) -> None:
    evaluator = contiguous(data.draw(tokenization()))
    n_chars = int(evaluator[-1, 1])
    evaluated = data.draw(messy_offsets(n_chars))
    picked = np.array(data.draw(st.lists(st.booleans(), min_size=len(evaluator), max_size=len(evaluator))))
    a, b, _ = merge_spans(evaluator[picked, 0], evaluator[picked, 1])
    mask = hard_key_mask(evaluated, a, b)
    np.testing.assert_array_equal(mask, official_mask(evaluated, a, b))
    inside = ((a[None, :] <= evaluated[:, :1]) & (evaluated[:, 1:] <= b[None, :])).any(axis=1)
    np.testing.assert_array_equal(mask, inside)  # plain containment, ends included for empty tokens
    in_key = np.zeros(n_chars, dtype=bool)
    for lo, hi in zip(a, b, strict=True):
        in_key[lo:hi] = True
    in_tok = np.zeros(n_chars, dtype=bool)
    for lo, hi in evaluated[mask]:
        in_tok[lo:hi] = True
    assert covered_key_chars(evaluated, mask, a, b) == (int(in_key.sum()), int((in_key & in_tok).sum()))


@SETTINGS
@given(
    rows=st.lists(st.tuples(st.integers(0, 10), st.integers(0, 4)), max_size=20),
    span_rows=st.lists(st.tuples(st.integers(0, 10), st.integers(0, 4)), max_size=5),
)
def test_matches_cal_overlap_on_any_offsets(rows: list[tuple[int, int]], span_rows) -> None:
    """Even offsets no tokenizer makes (ends going backwards) follow cal_overlap's pointer."""
    offsets = off(*sorted((s, s + n) for s, n in rows))
    a, b, _ = merge_spans(*spans(*((s, s + n) for s, n in span_rows)))
    np.testing.assert_array_equal(hard_key_mask(offsets, a, b), official_mask(offsets, a, b))


def test_ends_going_backwards_follow_cal_overlap() -> None:
    # (5, 9) sticks out of (5, 8), so cal_overlap moves past the span and never sees (6, 7) in it
    assert key(off((5, 9), (6, 7)), (5, 8)) == []
    assert key(off((4, 9), (6, 6)), (5, 8)) == [1]
    assert key(off((3, 9), (3, 3)), (2, 4)) == []  # (3, 3) lies in (2, 4), but the scan has moved on


@SETTINGS
@given(data=st.data())
def test_soft_weights_match_reference(data: st.DataObject) -> None:
    n_chars = data.draw(st.integers(0, 25))
    evaluator = data.draw(messy_offsets(n_chars))
    evaluated = data.draw(messy_offsets(n_chars))
    weights = np.array(
        data.draw(
            st.lists(
                st.one_of(st.floats(0.0, 5.0), st.just(NAN)),
                min_size=len(evaluator),
                max_size=len(evaluator),
            )
        )
    )
    char_w = np.full(n_chars, NAN)
    for c in range(n_chars):
        cover = weights[(evaluator[:, 0] <= c) & (c < evaluator[:, 1])]
        if cover.size:
            char_w[c] = cover.mean()
    expected = np.array(
        [np.nanmean(char_w[s:e]) if np.any(~np.isnan(char_w[s:e])) else NAN for s, e in evaluated]
    )
    np.testing.assert_allclose(character_weights(evaluator, weights, n_chars), char_w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        soft_weights(evaluated, evaluator, weights, n_chars), expected, rtol=1e-12, atol=1e-12
    )
