"""Block-sparse attention: exact, with no sequence x sequence mask and no wasted key blocks.

transformers' ``sdpa`` gives a sliding-window layer (Mistral, Qwen2, Gemma 2/3) its full
(batch, 1, n, n) boolean mask, 1 GiB at 32k tokens and copied to every GPU of a device map, and
PyTorch's kernels then compute every query-key product, masked or not. ``blocked_sdpa`` splits the
queries into blocks of ``QUERY_BLOCK`` and gives each block only the span of keys its mask lets it
see: the others would contribute exp(-inf) = 0 to the softmax, so the result is the same attention.

- Its mask function (``window_mask``) returns ``SlidingWindow(size)``, a description instead of a
  tensor, whenever that describes transformers' mask exactly (no padding, no cache, and a mask
  function checked on a probe to be the plain causal sliding window); each query block then builds
  its own band, O(QUERY_BLOCK x (QUERY_BLOCK + size)), with no host-device synchronisation.
- Queries that follow a cache of keys (a prompt's own tokens after the ones its questions share:
  LooGLE's batched decoding), plain causal, on the CPU or CUDA, more than ``QUERY_BLOCK`` of them:
  ``CausalAfterCache``, a description too. On the CPU the attention is two fused passes merged by
  their log-sum-exp, over the cached keys unmasked and over the new keys causally, so no key outside
  the causal triangle is computed (``attention_after_cache``; PyTorch's CPU kernel given a mask computes
  every query-key product); on CUDA one fused pass with PyTorch's lower-right causal bias
  (``lower_right_causal``).
- Any other mask is transformers' own (``sdpa_mask``): plain causal layers get none (sdpa's causal
  kernel), other patterns a dense boolean mask whose key spans are found for all query blocks at
  once (one synchronisation per layer).
- Soft-capped attention logits (Gemma 2's ``softcap``, which sdpa cannot apply) run transformers'
  eager formula block by block, never on more than one block of queries x its keys.
- A plain causal pass that sdpa would run on its math backend (``runs_on_math_backend``: no fused
  kernel takes it as transformers hands it over, e.g. float32 on CUDA with grouped key/value heads
  and ``enable_gqa``, or a backend forced with ``torch.nn.attention.sdpa_kernel``) runs on a fused
  kernel with its key/value heads repeated where one takes that form (``fused_with_repeated_heads``:
  float32 on CUDA, the memory-efficient kernel), else as query blocks: the math backend builds the
  whole (heads, n, n) score matrix, 128 GiB for Llama-3.1-8B at 32k tokens; blocks build at most
  (heads, QUERY_BLOCK, n). Where a fused kernel applies (every CPU run: flash) nothing changes.

Selected with ``attn_implementation: blocked_sdpa`` (the pipeline's default). transformers checks
any implementation whose name contains "sdpa" against the model's sdpa support, which Gemma 2
refuses: the same functions are registered as ``blocked_attention`` too, and ``pipeline.models.loading``
loads such models with that name.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn.attention import SDPBackend
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward, use_gqa_in_sdpa
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "blocked_sdpa"
ALIAS = "blocked_attention"  # the same, for models that refuse any name with "sdpa" in it (Gemma 2)
QUERY_BLOCK = 512
CALLS = [0]  # how many times blocked_sdpa_forward ran: models that never call it are caught at load


@dataclass(frozen=True)
class SlidingWindow:
    """A causal sliding-window mask, described rather than built: with queries and keys at the same
    positions 0 .. n-1, query i sees keys i - size + 1 .. i (transformers' sliding-window mask)."""

    size: int

    def span(self, a: int, b: int) -> tuple[int, int]:
        """The keys queries a .. b-1 may see, together."""
        return max(0, a - self.size + 1), b

    def band(self, a: int, b: int, device: torch.device) -> torch.Tensor:
        """The (1, 1, b - a, span) boolean mask of queries a .. b-1 over their key span."""
        k0, k1 = self.span(a, b)
        q = torch.arange(a, b, device=device)[:, None]
        k = torch.arange(k0, k1, device=device)[None, :]
        return ((k <= q) & (k > q - self.size))[None, None]


@dataclass(frozen=True)
class CausalAfterCache:
    """A causal mask of queries that follow ``past`` cached keys, described rather than built: the
    i-th new query sees keys 0 .. past + i."""

    past: int

    def dense(self, q_len: int, kv_len: int, device: torch.device) -> torch.Tensor:
        """The (1, 1, q_len, kv_len) boolean mask it describes (transformers' own)."""
        q = torch.arange(self.past, self.past + q_len, device=device)[:, None]
        return (torch.arange(kv_len, device=device)[None, :] <= q)[None, None]


def probe_matches(mask_function, q: torch.Tensor, k: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether ``mask_function`` (transformers' index-based mask function) gives ``expected`` on query
    rows ``q`` (a column) and key columns ``k`` (a row)."""
    zero = torch.zeros(1, 1, dtype=torch.long)
    try:
        got = mask_function(zero, zero, q, k)
    except Exception:  # a function that cannot take index tensors is not the plain mask probed for
        return False
    return torch.is_tensor(got) and bool(torch.equal(got.expand(len(q), k.shape[1]), expected))


def is_plain_causal(mask_function) -> bool:
    """Whether ``mask_function`` is exactly the causal mask, checked on a probe."""
    q, k = torch.tensor([0, 1, 5, 9])[:, None], torch.arange(12)[None, :]
    return probe_matches(mask_function, q, k, k <= q)


def is_plain_sliding_window(mask_function, size: int) -> bool:
    """Whether ``mask_function`` is exactly the causal sliding window of ``size``, checked on the query
    rows where a window's edges show."""
    q = torch.tensor([0, 1, size - 1, size, size + 1, 2 * size + 1])[:, None]
    k = torch.arange(2 * size + 2)[None, :]
    return probe_matches(mask_function, q, k, (k <= q) & (k > q - size))


def window_mask(**kwargs):
    """transformers' mask function for ``blocked_sdpa``: ``SlidingWindow`` or ``CausalAfterCache``
    where one describes the mask exactly, else what ``sdpa`` would get (``sdpa_mask``; None for a
    plain causal layer)."""
    size = kwargs.get("local_size")
    q_offset, kv_offset = kwargs.get("q_offset", 0), kwargs.get("kv_offset", 0)
    q_len, kv_len = kwargs["q_length"], kwargs["kv_length"]
    unpadded = (  # what either description needs: no padding, whole-number offsets from the start
        kwargs.get("attention_mask") is None
        and not kwargs.get("use_vmap", False)
        and isinstance(q_offset, int)
        and isinstance(kv_offset, int)
        and kv_offset == 0
    )
    if (
        unpadded
        and size is None
        and torch.device(kwargs.get("device", "cpu")).type in ("cpu", "cuda")
        and q_offset > 0
        and kv_len == q_offset + q_len
        and q_len > QUERY_BLOCK
        and is_plain_causal(kwargs["mask_function"])
    ):
        return CausalAfterCache(q_offset)
    if (
        unpadded
        and size is not None
        and kwargs.get("allow_is_causal_skip", True)
        and q_offset == 0
        and q_len == kv_len >= size
        and is_plain_sliding_window(kwargs["mask_function"], size)
    ):
        return SlidingWindow(size)
    return sdpa_mask(**kwargs)


def dense_spans(mask: torch.Tensor, q_len: int) -> list[tuple[int, int]]:
    """For each block of queries, the first and one-past-last key column any of them may see in a
    dense boolean mask (batch, heads, queries, keys): one host-device synchronisation for all."""
    visible = torch.stack(
        [
            mask[:, :, a : a + QUERY_BLOCK].any(dim=2).any(dim=1).any(dim=0)
            for a in range(0, q_len, QUERY_BLOCK)
        ]
    )
    n_keys = visible.shape[1]
    seen = visible.any(dim=1)
    first = visible.int().argmax(dim=1)
    last = n_keys - visible.flip(1).int().argmax(dim=1)
    spans = torch.stack([torch.where(seen, first, 0), torch.where(seen, last, n_keys)], dim=1)
    return [(int(k0), int(k1)) for k0, k1 in spans.tolist()]


def runs_on_math_backend(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether sdpa would run the plain causal attention of these tensors, as transformers hands them
    to it (grouped heads with ``enable_gqa`` or repeated), on its math backend: PyTorch's own choice,
    which honours ``sdpa_kernel``."""
    groups = getattr(module, "num_key_value_groups", 1)
    return math_backend_choice(groups, bool(getattr(module, "is_causal", True)), query, key, value)


@torch.compiler.assume_constant_result
def math_backend_choice(groups: int, causal: bool, query, key, value) -> bool:
    """``runs_on_math_backend`` of a layer with ``groups`` key/value groups. Its answer depends on the
    tensors' dtype, device and head sizes, which a compiled layer's graph guards, so under
    ``torch.compile`` it is a constant of the trace (``torch._fused_sdp_choice`` returns an integer,
    which would break the graph in two); asked with the group count and causality, not the layer,
    since a constant's arguments are guarded by identity (one graph per layer). Eager: a plain call."""
    gqa = groups > 1 and use_gqa_in_sdpa(None, key, value)
    if groups > 1 and not gqa:
        key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    choice = torch._fused_sdp_choice(query, key, value, None, 0.0, causal, enable_gqa=gqa)
    return SDPBackend(choice) == SDPBackend.MATH


def fused_with_repeated_heads(module, query, key, value, scaling: float | None) -> torch.Tensor | None:
    """Plain causal attention with the key/value heads repeated, where that form has a fused kernel
    and the grouped form has none (float32 on CUDA: the memory-efficient kernel takes float32 but not
    ``enable_gqa``); None where the repeated form would run on the math backend too."""
    groups = getattr(module, "num_key_value_groups", 1)
    if groups <= 1:
        return None
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    causal = bool(getattr(module, "is_causal", True))
    if SDPBackend(torch._fused_sdp_choice(query, key, value, None, 0.0, causal)) == SDPBackend.MATH:
        return None
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=causal, scale=scaling)
    return out.transpose(1, 2).contiguous()


def softcapped_attention(module, query, key, value, mask, *, softcap: float, scaling=None, **kwargs):
    """transformers' eager attention with soft-capped logits (Gemma 2), for one block of queries:
    scores = tanh(q k^T * scaling / softcap) * softcap, masked, softmax in at least float32."""
    if scaling is None:
        scaling = module.head_dim**-0.5
    key = repeat_kv(key, module.num_key_value_groups)
    value = repeat_kv(value, module.num_key_value_groups)
    scores = torch.tanh(torch.matmul(query, key.transpose(2, 3)) * scaling / softcap) * softcap
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask[..., : key.shape[2]], torch.finfo(scores.dtype).min)
    elif mask is not None:  # an additive mask
        scores = scores + mask[..., : key.shape[2]]
    softmax_dtype = torch.promote_types(query.dtype, torch.float32)
    weights = torch.softmax(scores, dim=-1, dtype=softmax_dtype).to(query.dtype)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), None


def attention_after_cache(query, key, value, past: int, scaling: float | None) -> torch.Tensor:
    """Causal attention of queries that follow ``past`` cached keys, on the CPU: PyTorch's fused kernel
    over the cached keys (no mask) and over the new keys (causal), merged by their log-sum-exp."""
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    old, old_lse = flash(query, key[:, :, :past], value[:, :, :past], scale=scaling)[:2]
    new, new_lse = flash(query, key[:, :, past:], value[:, :, past:], is_causal=True, scale=scaling)[:2]
    dtype = torch.promote_types(query.dtype, torch.float32)
    total = torch.logaddexp(old_lse, new_lse)
    out = (
        old.to(dtype) * torch.exp(old_lse - total)[..., None]
        + new.to(dtype) * torch.exp(new_lse - total)[..., None]
    )
    return out.to(query.dtype).transpose(1, 2).contiguous()


def lower_right_causal(module, query, key, value, scaling: float | None) -> torch.Tensor:
    """Causal attention of queries that follow cached keys, on CUDA: sdpa with PyTorch's lower-right
    causal bias (``causal_lower_right``), which its flash or memory-efficient kernel applies without a
    mask and without computing a key past the causal edge (a dense boolean mask, in query blocks, took
    1.44x a whole prefill's time on an H200 for the last 16k of 32k tokens). The key/value heads are
    repeated, as the bias's kernels take them; elsewhere PyTorch builds the mask itself."""
    from torch.nn.attention.bias import causal_lower_right

    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    bias = causal_lower_right(query.shape[2], key.shape[2])
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=bias, scale=scaling)
    return out.transpose(1, 2).contiguous()


def blocked_sdpa_forward(module, query, key, value, attention_mask, **kwargs) -> tuple[torch.Tensor, None]:
    """Attention over query blocks, each given the keys its mask allows.

    Returns (batch x query x heads x head_dim, None), as transformers' attention functions do.
    """
    if not torch.compiler.is_compiling():  # a count inside a compiled graph would recompile it at each call
        CALLS[0] += 1
    softcap = kwargs.pop("softcap", None)
    q_len, kv_len = query.shape[2], key.shape[2]
    if isinstance(attention_mask, CausalAfterCache):
        if softcap is None and query.device.type == "cpu":
            return attention_after_cache(query, key, value, attention_mask.past, kwargs.get("scaling")), None
        if softcap is None:
            return lower_right_causal(module, query, key, value, kwargs.get("scaling")), None
        attention_mask = attention_mask.dense(q_len, kv_len, query.device)
    if attention_mask is None and softcap is not None and q_len == kv_len:
        attention_mask = SlidingWindow(q_len)  # plain causal, as blocks
    elif (
        attention_mask is None
        and q_len == kv_len > QUERY_BLOCK
        and runs_on_math_backend(module, query, key, value)
    ):
        fused = fused_with_repeated_heads(module, query, key, value, kwargs.get("scaling"))
        if fused is not None:
            return fused, None
        attention_mask = SlidingWindow(q_len)  # plain causal, as blocks: no (heads, n, n) scores
    if isinstance(attention_mask, SlidingWindow):
        window = attention_mask
        blocks = [(a, min(a + QUERY_BLOCK, q_len)) for a in range(0, q_len, QUERY_BLOCK)]
        spans = [window.span(a, b) for a, b in blocks]
        # one block's band at a time: O(QUERY_BLOCK x (QUERY_BLOCK + size)), never all of them at once
        masks = (window.band(a, b, query.device).expand(query.shape[0], -1, -1, -1) for a, b in blocks)
    elif attention_mask is None or attention_mask.dtype != torch.bool or q_len <= QUERY_BLOCK:
        if softcap is None:
            return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        return softcapped_attention(module, query, key, value, attention_mask, softcap=softcap, **kwargs)
    else:
        blocks = [(a, min(a + QUERY_BLOCK, q_len)) for a in range(0, q_len, QUERY_BLOCK)]
        spans = dense_spans(attention_mask, q_len)
        masks = [attention_mask[:, :, a:b, k0:k1] for (a, b), (k0, k1) in zip(blocks, spans, strict=True)]
    outputs = []
    for (a, b), (k0, k1), mask in zip(blocks, spans, masks, strict=True):
        block, keys, values = query[:, :, a:b], key[:, :, k0:k1], value[:, :, k0:k1]
        if softcap is None:
            out, _ = sdpa_attention_forward(module, block, keys, values, mask, **kwargs)
        else:
            out, _ = softcapped_attention(module, block, keys, values, mask, softcap=softcap, **kwargs)
        outputs.append(out)
    return torch.cat(outputs, dim=1), None


for _name in (NAME, ALIAS):
    AttentionInterface.register(_name, blocked_sdpa_forward)
    AttentionMaskInterface.register(_name, window_mask)
