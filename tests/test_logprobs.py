"""Exactness of the log-prob engine: every value equals a direct forward pass on its own context."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.errors import PipelineError
from pipeline.logprobs import TargetScorer, context_limited_logprobs, long_and_short_logprobs, short_windows
from tests.conftest import build_model

VOCAB = 97
BOS = 0


def direct_logprob(model, context: list[int], target: int) -> float:
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([context]), use_cache=False).logits[0, -1]
    return torch.log_softmax(logits.double(), -1)[target].item()


def expected_short_context(seq: list[int], p: int, K: int, d: int, bos: int | None) -> list[int] | None:
    """The paper's sliding-window context of position p (Eq. 8), computed independently."""
    if p < K:
        return None
    start = ((p - K) // d) * d
    if start == 0:
        return seq[:p]
    return ([bos] if bos is not None else []) + seq[start:p]


@pytest.mark.parametrize("arch", ["llama", "gemma3", "qwen2"])
@pytest.mark.parametrize(
    ("n", "K", "d"),
    [
        (31, 8, 4),  # partial last window
        (28, 8, 4),  # n - K a multiple of d
        (11, 8, 4),  # shorter than K + d: only the window at 0
        (8, 8, 4),  # no token has a short context
        (2, 8, 4),
    ],
)
@pytest.mark.parametrize("bos", [None, BOS])
def test_every_logprob_equals_a_direct_computation(arch, n, K, d, bos):
    model = build_model(arch, VOCAB)
    generator = torch.Generator().manual_seed(n * 31 + K)
    seq = torch.randint(2, VOCAB, (n,), generator=generator)
    if bos is not None:
        seq[0] = bos
    scorer = TargetScorer(model, head_chunk=3)  # several chunks per pass
    result = long_and_short_logprobs(scorer, seq, K, d, bos_id=bos, window_batch_tokens=2 * (K + d + 1))
    ids = seq.tolist()
    assert np.isnan(result.long[0])
    for p in range(1, n):
        assert abs(result.long[p] - direct_logprob(model, ids[:p], ids[p])) < 1e-9
        context = expected_short_context(ids, p, K, d, bos)
        if context is None:
            assert np.isnan(result.short[p])
        else:
            assert abs(result.short[p] - direct_logprob(model, context, ids[p])) < 1e-9


def test_batched_and_unbatched_windows_agree():
    model = build_model("llama", VOCAB)
    seq = torch.randint(2, VOCAB, (60,), generator=torch.Generator().manual_seed(1))
    scorer = TargetScorer(model, head_chunk=5)
    one = long_and_short_logprobs(scorer, seq, 8, 4, bos_id=BOS, window_batch_tokens=1)
    many = long_and_short_logprobs(scorer, seq, 8, 4, bos_id=BOS, window_batch_tokens=10_000)
    np.testing.assert_allclose(one.short, many.short, rtol=0, atol=1e-12)


def test_windows_cover_each_token_once():
    for n, K, d in [(100, 8, 4), (101, 16, 16), (17, 16, 16), (1000, 64, 7)]:
        covered = np.zeros(n, dtype=int)
        covered[K : min(K + d, n)] += 1  # the window at 0 comes from the long pass
        for w in short_windows(n, K, d):
            assert w.first - w.start == K and w.end - w.start <= K + d
            covered[w.first : w.end] += 1
        assert (covered[K:] == 1).all() and (covered[:K] == 0).all()


def test_head_postprocessing_is_checked():
    model = build_model("gemma3", VOCAB)
    scorer = TargetScorer(model)
    scorer.check_against_full_forward()  # soft-capping applied: passes
    scorer.post = lambda logits: logits  # forget the soft-capping
    with pytest.raises(PipelineError, match="output head"):
        scorer.check_against_full_forward()


def test_head_memory_is_bounded_by_chunk(monkeypatch):
    """The head never sees more than head_chunk positions at once."""
    model = build_model("llama", VOCAB)
    scorer = TargetScorer(model, head_chunk=7, vocab_tile=None)
    seen = []
    head = scorer.head
    monkeypatch.setattr(scorer, "head", lambda h: seen.append(h.shape[0]) or head(h))
    long_and_short_logprobs(scorer, torch.randint(2, VOCAB, (50,)), 8, 4)
    assert max(seen) <= 7


@pytest.mark.parametrize(("n", "window"), [(30, 8), (31, 9), (8, 8), (5, 16)])
def test_context_limited_logprobs_see_at_most_window_tokens(n, window):
    model = build_model("llama", VOCAB)
    seq = torch.randint(2, VOCAB, (n,), generator=torch.Generator().manual_seed(n))
    seq[0] = BOS
    scorer = TargetScorer(model, head_chunk=4)
    values = context_limited_logprobs(scorer, seq, window, bos_id=BOS, window_batch_tokens=3 * window)
    ids = seq.tolist()
    d = window // 2
    for p in range(1, n):
        context = ids[:p] if p < window else expected_short_context(ids, p, window - d, d, BOS)
        assert len(context) <= window + 1  # + the BOS prefix
        assert abs(values[p] - direct_logprob(model, context, ids[p])) < 1e-9


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_vocabulary_tiles_give_the_same_logprobs(arch):
    model = build_model(arch, VOCAB)
    seq = torch.randint(2, VOCAB, (40,), generator=torch.Generator().manual_seed(3))
    whole = TargetScorer(model, head_chunk=7).score(seq, torch.arange(39))
    for tile in (1, 10, 32, 96):
        tiled = TargetScorer(model, head_chunk=7, vocab_tile=tile).score(seq, torch.arange(39))
        np.testing.assert_allclose(tiled.numpy(), whole.numpy(), rtol=0, atol=1e-12)


def test_tiled_head_memory_is_bounded_by_chunk_and_tile(monkeypatch):
    model = build_model("llama", VOCAB)
    scorer = TargetScorer(model, head_chunk=7, vocab_tile=10)
    shapes = []
    linear = torch.nn.functional.linear
    monkeypatch.setattr(
        torch.nn.functional, "linear", lambda *a, **k: shapes.append(linear(*a, **k).shape) or linear(*a, **k)
    )
    scorer.score_hidden(torch.randn(50, 32, dtype=torch.float64), torch.randint(0, VOCAB, (50,)))
    assert shapes and max(s[0] for s in shapes) <= 7 and max(s[1] for s in shapes) <= 10
