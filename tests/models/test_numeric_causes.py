"""The causes behind the GPU tests' tolerances (tests/models/test_gpu.py), pinned on the CPU.

- A float64 model is not float64 throughout: transformers computes its RMSNorm and its rotary
  embedding in float32, so CPU and CUDA, whose float32 kernels round otherwise, differ at float32
  rounding even in float64 (measured: 2.8e-5 on log-probs of 28 nats on an H100).
- The float32-output head of a bfloat16 model sums the same exact products in another order than the
  GEMM on upcast operands; its log-probs move by at most twice the largest logit difference, plus the
  float32 rounding of the logsumexp.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pipeline.models import attention
from tests.support import build_model
from tests.support import sum_order_bound as bound


class Float32Ops(TorchDispatchMode):
    """Counts the ops whose result is float32, by the module that ran them."""

    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.dtype == torch.float32:
            self.ops[func.overloadpacket.__name__] += 1
        return out


def float32_ops_by_module(model: torch.nn.Module, ids: torch.Tensor) -> dict[str, Counter]:
    """Module class name -> the float32 ops that module's own forward ran (children excluded)."""
    found: dict[str, Counter] = {}
    modes: list[Float32Ops] = []

    def pre(module, args):
        modes.append(Float32Ops())
        modes[-1].__enter__()

    def post(module, args, out):
        mode = modes.pop()
        mode.__exit__(None, None, None)
        if mode.ops:
            found.setdefault(type(module).__name__, Counter()).update(mode.ops)

    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [h for m in leaves for h in (m.register_forward_pre_hook(pre), m.register_forward_hook(post))]
    outer = Float32Ops()
    try:
        with torch.no_grad(), outer:
            model(ids)
    finally:
        for h in handles:
            h.remove()
    inside = Counter()
    for ops in found.values():
        inside.update(ops)
    rest = outer.ops - inside
    if rest:
        found["(outside the leaf modules)"] = rest
    return found


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_a_float64_model_runs_its_norms_and_rotary_embedding_in_float32(arch):
    """Every float32 op in a float64 forward is in an RMSNorm or a rotary embedding: the steps whose
    float32 kernels round otherwise on CUDA (tests/models/test_gpu.py, the device-map test)."""
    model = build_model(arch, 97).to(torch.float64).eval()
    model.config._attn_implementation = attention.NAME
    found = float32_ops_by_module(model, torch.randint(2, 97, (1, 40)))
    assert found, "no float32 step: the GPU tests could compare float64 models across devices exactly"
    assert {name for name in found if not name.endswith(("RMSNorm", "RotaryEmbedding"))} == set()
    norms = Counter()
    for name, ops in found.items():
        if name.endswith("RMSNorm"):
            norms.update(ops)
    assert {"mean", "rsqrt"} <= set(norms)
    rotary = Counter()
    for name, ops in found.items():
        if name.endswith("RotaryEmbedding"):
            rotary.update(ops)
    assert {"cos", "sin"} <= set(rotary)


def bfloat16_head(seed: int = 0, positions: int = 16, hidden: int = 512, vocab: int = 2000):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(positions, hidden, generator=g).to(torch.bfloat16)
    w = (torch.randn(vocab, hidden, generator=g) * 0.2).to(torch.bfloat16)
    return h, w


def logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return logits.log_softmax(dim=-1).gather(1, targets[:, None])[:, 0]


def test_the_head_reordering_bound_holds_for_another_order_of_sums_and_fails_for_rounding():
    """Two float32 GEMMs of the same bfloat16 operands summed in other orders (whole, and in 64-wide
    slices added up) give log-probs within the bound; logits rounded to bfloat16 (a head that is not
    float32) break it, so the GPU test can fail."""
    h, w = bfloat16_head()
    targets = torch.arange(h.shape[0]) * 37 % w.shape[0]
    whole = h.float() @ w.float().t()
    sliced = sum(h[:, k : k + 64].float() @ w[:, k : k + 64].float().t() for k in range(0, h.shape[1], 64))
    assert (whole != sliced).any()  # the orders do round otherwise
    lp_whole, lp_sliced = logprobs(whole, targets), logprobs(sliced, targets)
    assert ((lp_sliced - lp_whole).abs() <= bound(sliced, whole, lp_whole)).all()
    rounded = whole.to(torch.bfloat16).float()
    lp_rounded = logprobs(rounded, targets)
    assert not ((lp_rounded - lp_whole).abs() <= bound(sliced, whole, lp_whole)).all()
