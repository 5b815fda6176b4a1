"""Block-sparse scaled-dot-product attention: exact, and faster for sliding-window layers.

transformers' ``sdpa`` gives a sliding-window layer (Gemma 2/3, Qwen2, Mistral) its full
sequence x sequence mask, and PyTorch's CPU kernels then compute every query-key product, masked
or not. ``blocked_sdpa`` splits the queries into blocks and gives each block only the span of keys
its mask lets it see: the left-out keys are masked for every query of the block, so they would
contribute exp(-inf) = 0 to the softmax; the result is the same attention (up to float rounding).
Layers without a mask (plain causal) go straight to ``sdpa``, whose causal kernel already skips
the masked half. Selected with ``attn_implementation: blocked_sdpa`` (the pipeline's default).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "blocked_sdpa"
QUERY_BLOCK = 512


def _key_span(mask: torch.Tensor) -> tuple[int, int]:
    """First and one-past-last key column any query of this block of the mask may attend to."""
    cols = mask.any(dim=2).any(dim=1).any(dim=0).nonzero()
    if len(cols) == 0:
        return 0, mask.shape[-1]
    return int(cols[0]), int(cols[-1]) + 1


def blocked_sdpa_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """``sdpa`` over query blocks, each given the keys its boolean mask allows.

    Returns (batch x query x heads x head_dim, None), as transformers' attention functions do.
    """
    q_len = query.shape[2]
    if attention_mask is None or attention_mask.dtype != torch.bool or q_len <= QUERY_BLOCK:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    outputs = []
    for a in range(0, q_len, QUERY_BLOCK):
        rows = attention_mask[:, :, a : a + QUERY_BLOCK, :]
        k0, k1 = _key_span(rows)
        block = query[:, :, a : a + QUERY_BLOCK]
        keys, values = key[:, :, k0:k1], value[:, :, k0:k1]
        out, _ = sdpa_attention_forward(module, block, keys, values, rows[..., k0:k1], **kwargs)
        outputs.append(out)
    return torch.cat(outputs, dim=1), None


AttentionInterface.register(NAME, blocked_sdpa_forward)
AttentionMaskInterface.register(NAME, sdpa_mask)
