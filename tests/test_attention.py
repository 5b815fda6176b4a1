"""Block-sparse attention (pipeline/attention.py) equals full attention, and really skips keys."""

from __future__ import annotations

import pytest
import torch

from pipeline import attention
from tests.conftest import build_model


def _hidden(model, impl: str, ids: torch.Tensor) -> torch.Tensor:
    model.set_attn_implementation(impl)
    with torch.inference_mode():
        return model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states[-1]


@pytest.mark.parametrize("arch", ["gemma3", "llama", "qwen2"])
@pytest.mark.parametrize("length", [5, 8, 9, 37, 64])
def test_blocked_equals_sdpa(arch, length):
    model = build_model(arch, 300)
    ids = torch.randint(2, 300, (2, length), generator=torch.Generator().manual_seed(length))
    reference = _hidden(model, "sdpa", ids)  # eager softmaxes in float32
    blocked = _hidden(model, attention.NAME, ids)
    assert torch.allclose(blocked, reference, rtol=0, atol=1e-10)


def test_sliding_window_layers_see_only_their_keys(monkeypatch):
    """With a 6-token window and blocks of 8 queries, no block gets more than 8 + 5 keys."""
    seen = []
    inner = attention.sdpa_attention_forward

    def spy(module, query, key, value, mask, **kwargs):
        seen.append((query.shape[2], key.shape[2], mask is None))
        return inner(module, query, key, value, mask, **kwargs)

    monkeypatch.setattr(attention, "sdpa_attention_forward", spy)
    model = build_model("gemma3", 300)
    _hidden(model, attention.NAME, torch.randint(2, 300, (1, 40)))
    masked = [(q, k) for q, k, no_mask in seen if not no_mask]
    assert len(masked) == 5  # the sliding layer: 40 queries in blocks of 8
    assert max(k for _, k in masked) <= 8 + 5
    assert [q for q, _, no_mask in seen if no_mask] == [40]  # the full-attention layer: one causal call
