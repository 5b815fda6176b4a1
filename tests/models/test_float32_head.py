"""The float32 head of a 16-bit model as one GEMM with float32 output (``torch.mm(..., out_dtype=...)``):
what the CPU supports, the scorer's use of it where a device has it, and its fallback elsewhere.
The GEMM itself runs on CUDA only (tests/models/test_gpu.py compares it with the upcast computation)."""

from __future__ import annotations

import pytest
import torch

from pipeline.models import float32_head, logprobs
from pipeline.models.float32_head import float32_logits, float32_output_supported
from pipeline.models.logprobs import TargetScorer
from tests.support import build_model

VOCAB = 300


def test_the_cpu_has_no_float32_output_gemm():
    """torch 2.13's CPU build has no kernel for ``mm`` with ``out_dtype`` (NotImplementedError), so
    the head runs on upcast operands there; the meta device has the operator's signature."""
    for dtype in (torch.bfloat16, torch.float16):
        assert not float32_output_supported(torch.device("cpu"), dtype)
        with pytest.raises(NotImplementedError, match=r"aten::(mm|addmm)\.dtype"):
            float32_logits(torch.ones(2, 4, dtype=dtype), torch.ones(3, 4, dtype=dtype), None)
    assert not float32_output_supported(torch.device("cpu"), torch.float32)  # not a 16-bit dtype
    meta = {"device": "meta", "dtype": torch.bfloat16}
    out = float32_logits(torch.ones(5, 8, **meta), torch.ones(7, 8, **meta), torch.ones(7, **meta))
    assert (out.shape, out.dtype) == ((5, 7), torch.float32)


def emulated(hidden, weight, bias):
    """What the CUDA kernel computes, on the CPU: exact products of the 16-bit operands, summed in a
    wider type, written in float32."""
    assert hidden.dtype == weight.dtype == torch.bfloat16 and (bias is None or bias.dtype == weight.dtype)
    out = hidden.double() @ weight.double().T + (0 if bias is None else bias.double())
    return out.float()


@pytest.fixture
def device_with_float32_output(monkeypatch):
    """A CPU that pretends to have the GEMM (``emulated``); returns the calls' shapes."""
    calls = []

    def gemm(hidden, weight, bias):
        calls.append((tuple(hidden.shape), tuple(weight.shape)))
        return emulated(hidden, weight, bias)

    monkeypatch.setattr(
        logprobs, "float32_output_supported", lambda device, dtype: dtype in (torch.bfloat16, torch.float16)
    )
    monkeypatch.setattr(logprobs, "float32_logits", gemm)
    return calls


@pytest.mark.parametrize("bias", [False, True])
def test_the_float32_head_uses_the_gemm_where_it_exists(device_with_float32_output, bias):
    """A bfloat16 model with a float32 head: every vocabulary tile is one 16-bit GEMM with float32
    output, never an upcast copy of the weights, and the log-probs are those of the upcast
    computation to float32 rounding (the products are exact in float32 either way)."""
    model = build_model("llama", VOCAB, seed=2).to(torch.bfloat16)
    if bias:
        model.lm_head.bias = torch.nn.Parameter(torch.randn(VOCAB).to(torch.bfloat16))
    seq = torch.randint(2, VOCAB, (40,), generator=torch.Generator().manual_seed(0))
    mixed = TargetScorer(model, head_chunk=16, vocab_tile=64, head_dtype=torch.float32)
    upcast = TargetScorer(model, head_chunk=16, vocab_tile=64, head_dtype=torch.float32)
    upcast.float32_output = False
    got = mixed.score(seq, torch.arange(39))
    assert device_with_float32_output and all(w[0] <= 64 for _, w in device_with_float32_output)
    calls = len(device_with_float32_output)
    want = upcast.score(seq, torch.arange(39))
    assert len(device_with_float32_output) == calls  # the upcast path does not call it
    assert (got - want).abs().max().item() < 1e-4 * want.abs().max().item()
    mixed.check_against_full_forward()


def test_the_gemm_is_used_only_for_a_float32_head_over_16_bit_operands(device_with_float32_output):
    """Not for a bfloat16 head (the model's own rounding), nor a float64 model, nor hidden states of
    another dtype than the weights (they would be rounded to it first)."""
    seq = torch.randint(2, VOCAB, (20,), generator=torch.Generator().manual_seed(1))
    bf16 = build_model("llama", VOCAB).to(torch.bfloat16)
    TargetScorer(bf16, head_dtype=torch.bfloat16).score(seq, torch.arange(19))
    TargetScorer(build_model("llama", VOCAB), head_dtype=torch.float32).score(seq, torch.arange(19))
    scorer = TargetScorer(bf16, head_dtype=torch.float32)
    assert not scorer.uses_float32_output(torch.zeros(2, 32, dtype=torch.float32))
    assert scorer.uses_float32_output(torch.zeros(2, 32, dtype=torch.bfloat16))
    assert device_with_float32_output == []


def test_where_the_gemm_is_missing_the_head_runs_on_upcast_operands():
    """The CPU: the float32 head of a bfloat16 model is computed as before, on the upcast operands."""
    model = build_model("llama", VOCAB, seed=2).to(torch.bfloat16)
    scorer = TargetScorer(model, head_chunk=16, vocab_tile=64, head_dtype=torch.float32)
    hidden = torch.randn(10, 32).to(torch.bfloat16)
    assert not scorer.uses_float32_output(hidden)
    with scorer.head_ready():
        tiles = list(scorer.logit_tiles(hidden))
    whole = torch.cat([t for _, t in tiles], dim=1)
    assert whole.dtype == torch.float32
    assert torch.equal(whole, hidden.float() @ model.lm_head.weight.float().T)
    assert float32_head.float32_output_supported.cache_info().currsize >= 1  # probed once, cached
