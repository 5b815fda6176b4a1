"""Exactness of the log-prob engine: every value equals a direct forward pass on its own context."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.errors import PipelineError
from pipeline.models.logprobs import (
    TargetScorer,
    context_limited_logprobs,
    long_and_short_logprobs,
    rounding_tolerance,
    short_windows,
)
from pipeline.models.top1 import top1_hits
from tests.support import build_model

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


@pytest.mark.parametrize("arch", ["llama", "gemma3", "qwen2", "gemma2"])
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
    scorer = TargetScorer(model, head_chunk=3, window_batch_tokens=2 * (K + d + 1))  # several chunks a pass
    result = long_and_short_logprobs(scorer, seq, K, d, bos_id=bos)
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
    one = long_and_short_logprobs(
        TargetScorer(model, head_chunk=5, window_batch_tokens=1), seq, 8, 4, bos_id=BOS
    )
    many = long_and_short_logprobs(
        TargetScorer(model, head_chunk=5, window_batch_tokens=10_000), seq, 8, 4, bos_id=BOS
    )
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
    linear = torch.nn.functional.linear

    def spy(h, w, *args, **kwargs):
        if w.shape[0] == VOCAB:  # the head (not a layer of the body)
            seen.append(h.shape[0])
        return linear(h, w, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "linear", spy)
    long_and_short_logprobs(scorer, torch.randint(2, VOCAB, (50,)), 8, 4)
    assert seen and max(seen) <= 7


@pytest.mark.parametrize(("n", "window"), [(30, 8), (31, 9), (8, 8), (5, 16)])
def test_context_limited_logprobs_see_at_most_window_tokens(n, window):
    model = build_model("llama", VOCAB)
    seq = torch.randint(2, VOCAB, (n,), generator=torch.Generator().manual_seed(n))
    seq[0] = BOS
    scorer = TargetScorer(model, head_chunk=4, window_batch_tokens=3 * window)
    values = context_limited_logprobs(scorer, seq, window, bos_id=BOS)
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


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize("head_dtype", [torch.bfloat16, torch.float32])
def test_bfloat16_self_check_passes(arch, head_dtype):
    """bfloat16 on a CPU: the head checked like with like (in the model's dtype) and in float32,
    whose unrounded logits differ from the model's bfloat16 ones by up to about 0.09 here."""
    model = build_model(arch, 300, seed=3).to(torch.bfloat16)
    TargetScorer(model, head_chunk=5, vocab_tile=64, head_dtype=head_dtype).check_against_full_forward()


def test_rounding_tolerance_allows_rounding_and_nothing_more():
    """One bfloat16 ulp moved on every logit (another GEMM's rounding) stays within the tolerance;
    a forgotten soft-capping does not."""
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(40, 300, generator=generator, dtype=torch.float64) * 6).to(torch.bfloat16)
    targets = torch.randint(0, 300, (40, 1), generator=generator)

    def logprobs(x):
        return torch.log_softmax(x.double(), -1).gather(1, targets).squeeze(1)

    tolerance = rounding_tolerance(logits)
    ulp = torch.finfo(torch.bfloat16).eps * torch.exp2(torch.floor(torch.log2(logits.double().abs())))
    signs = torch.randint(0, 2, logits.shape, generator=generator) * 2 - 1
    assert ((logprobs(logits.double() + signs * ulp) - logprobs(logits)).abs() <= tolerance).all()
    capped = (torch.tanh(logits.double() / 15) * 15).to(torch.bfloat16)
    assert ((logprobs(capped) - logprobs(logits)).abs() > tolerance).any()
    assert rounding_tolerance(torch.full((1, 2), 20.0, dtype=torch.bfloat16)).item() == 4 * 0.125


def test_float32_head_removes_the_bfloat16_rounding_of_logits():
    """Same bfloat16 hidden states and weights: the float32 head's log-probs match a float64
    computation to float32 precision, the bfloat16 head's only to bfloat16 rounding."""
    model = build_model("llama", 300, seed=1).to(torch.bfloat16)
    seq = torch.randint(2, 300, (40,), generator=torch.Generator().manual_seed(0))
    hidden = TargetScorer(model).hidden_states(seq[None])[0, :-1]
    exact = torch.log_softmax(hidden.double() @ model.lm_head.weight.double().T, -1)
    exact = exact.gather(1, seq[1:, None]).squeeze(1)
    errors = {}
    for dtype in (torch.bfloat16, torch.float32):
        scorer = TargetScorer(model, head_chunk=7, vocab_tile=64, head_dtype=dtype)
        errors[dtype] = (scorer.score_hidden(hidden, seq[1:]) - exact).abs().max().item()
    assert errors[torch.float32] < 1e-4 < 0.01 < errors[torch.bfloat16]


def test_head_scoring_makes_one_host_copy_per_call(monkeypatch):
    """The hot loop never waits on the device: no .item(), .tolist(), .nonzero(), int() or bool() of
    a tensor in the attention or the head, and one copy to the host per batch of targets."""
    import sys

    from pipeline.models import attention

    monkeypatch.setattr(attention, "QUERY_BLOCK", 8)
    syncs = []
    for name in ("item", "tolist", "nonzero", "__int__", "__bool__", "cpu", "numpy"):
        original = getattr(torch.Tensor, name)

        def spy(self, *args, _name=name, _original=original, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if caller.endswith(("pipeline/models/logprobs.py", "pipeline/models/top1.py", "attention.py")):
                syncs.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, spy)
    to_host = []
    original_to = torch.Tensor.to
    monkeypatch.setattr(
        torch.Tensor,
        "to",
        lambda self, *a, **k: (a[:1] == ("cpu",) and to_host.append(1)) or original_to(self, *a, **k),
    )
    model = build_model("gemma3", VOCAB)
    scorer = TargetScorer(model, head_chunk=5, vocab_tile=10)
    seq = torch.randint(2, VOCAB, (60,), generator=torch.Generator().manual_seed(0))
    hidden = scorer.hidden_states(seq[None])[0]
    scorer.score_hidden(hidden[:-1], seq[1:])
    top1_hits(scorer, hidden[:-1], seq[1:])
    assert syncs == ["cpu", "numpy"] and len(to_host) == 1  # top1_hits once, score_hidden once
