"""Block-sparse attention (pipeline/models/attention.py) equals full attention, and really skips keys."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AttentionInterface, AutoModelForCausalLM
from transformers.masking_utils import (
    AttentionMaskInterface,
    causal_mask_function,
    chunked_causal_mask_function,
    sdpa_mask,
    sliding_window_causal_mask_function,
)

from pipeline.models import attention, loading
from studies.random_models import tiny_config
from tests.support import ROOT, build_model


def _hidden(model, impl: str, ids: torch.Tensor) -> torch.Tensor:
    model.set_attn_implementation(impl)
    with torch.inference_mode():
        return model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states[-1]


@pytest.mark.parametrize("arch", ["gemma3", "llama", "qwen2", "mistral"])
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


def test_band_path_is_bit_identical_to_the_dense_mask_path():
    """Artifacts made with the dense-mask blocks (before SlidingWindow) keep their bits: float32."""
    AttentionInterface.register("dense_blocked", attention.blocked_sdpa_forward)
    AttentionMaskInterface.register("dense_blocked", sdpa_mask)
    model = build_model("gemma3", 300).float()
    ids = torch.randint(2, 300, (2, 61), generator=torch.Generator().manual_seed(2))
    assert torch.equal(_hidden(model, attention.NAME, ids), _hidden(model, "dense_blocked", ids))


def test_gemma2_softcapped_attention_runs_blocked():
    """sdpa refuses Gemma 2's soft-capped attention logits: the blocks run the eager formula (whose
    softmax transformers takes in float32, hence 1e-6), never with more keys than a block needs."""
    model = build_model("gemma2", 300)
    assert model.config._attn_implementation == attention.ALIAS
    ids = torch.randint(2, 300, (2, 37), generator=torch.Generator().manual_seed(4))
    blocked = _hidden(model, attention.ALIAS, ids)
    assert torch.allclose(blocked, _hidden(model, "eager", ids), rtol=0, atol=1e-6)
    keys = []
    inner = attention.softcapped_attention
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            attention,
            "softcapped_attention",
            lambda m, q, k, *a, **kw: keys.append(k.shape[2]) or inner(m, q, k, *a, **kw),
        )
        _hidden(model, attention.ALIAS, ids)
    assert len(keys) == 2 * 5 and max(keys[:5]) <= 8 + 5  # sliding layer: 5 blocks of <= 8 + 5 keys


def test_softcapped_blocks_equal_a_direct_float64_computation():
    """The formula itself, exact in float64: tanh-capped scores, causal mask, softmax."""
    torch.manual_seed(0)
    module = SimpleNamespace(head_dim=8, num_key_value_groups=2)
    q, k, v = torch.randn(1, 4, 20, 8, dtype=torch.float64), *torch.randn(2, 1, 2, 20, 8, dtype=torch.float64)
    out, _ = attention.blocked_sdpa_forward(module, q, k, v, None, softcap=2.0, scaling=0.3)
    k4, v4 = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    scores = torch.tanh(q @ k4.transpose(2, 3) * 0.3 / 2.0) * 2.0
    scores = scores.masked_fill(~torch.ones(20, 20, dtype=torch.bool).tril(), -torch.inf)
    expected = (torch.softmax(scores, -1) @ v4).transpose(1, 2)
    assert torch.allclose(out, expected, rtol=0, atol=1e-12)


def test_mask_function_describes_only_the_plain_sliding_window():
    common = dict(batch_size=1, q_length=40, kv_length=40, local_size=6, allow_is_causal_skip=True)
    window = attention.window_mask(mask_function=sliding_window_causal_mask_function(6), **common)
    assert window == attention.SlidingWindow(6)
    dense = sdpa_mask(mask_function=sliding_window_causal_mask_function(6), **common)
    assert torch.equal(window.band(0, 40, torch.device("cpu")), dense)
    chunked = attention.window_mask(
        mask_function=chunked_causal_mask_function(6, torch.zeros(1, dtype=torch.long)), **common
    )
    padded = attention.window_mask(
        mask_function=sliding_window_causal_mask_function(6),
        attention_mask=torch.ones(1, 40, dtype=torch.bool),
        **common,
    )
    for mask in (chunked, padded):  # not a plain window: transformers' dense mask
        assert torch.is_tensor(mask) and mask.shape == (1, 1, 40, 40)
    assert attention.window_mask(mask_function=causal_mask_function, **{**common, "local_size": None}) is None


@pytest.mark.parametrize("seed", range(5))
def test_dense_spans_cover_exactly_the_visible_keys(seed, monkeypatch):
    monkeypatch.setattr(attention, "QUERY_BLOCK", 4)
    mask = torch.rand(2, 1, 11, 13, generator=torch.Generator().manual_seed(seed)) < 0.15
    mask[:, :, 4:8] = False  # a block that sees nothing
    for (k0, k1), a in zip(attention.dense_spans(mask, 11), range(0, 11, 4), strict=True):
        cols = mask[:, :, a : a + 4].any(dim=2).any(dim=1).any(dim=0).nonzero().flatten().tolist()
        assert (k0, k1) == ((cols[0], cols[-1] + 1) if cols else (0, 13))


def test_sliding_window_model_at_8k_tokens_builds_no_sequence_mask(monkeypatch):
    """8192 tokens through a model whose layers are all sliding windows: transformers would build a
    (1, 1, 8192, 8192) mask; here the layer gets a description of it, and no mask handed to a kernel
    exceeds a block of queries x (block + window) keys."""
    monkeypatch.setattr(attention, "QUERY_BLOCK", 512)
    layer_masks, kernel_masks = [], []

    def spy(module, q, k, v, mask, **kw):
        layer_masks.append(mask)
        return attention.blocked_sdpa_forward(module, q, k, v, mask, **kw)

    AttentionInterface.register("spy_blocked", spy)
    AttentionMaskInterface.register("spy_blocked", attention.window_mask)
    inner = attention.sdpa_attention_forward
    monkeypatch.setattr(
        attention,
        "sdpa_attention_forward",
        lambda m, q, k, v, mask, **kw: kernel_masks.append(mask) or inner(m, q, k, v, mask, **kw),
    )
    config = tiny_config("mistral", 300, max_positions=8192)
    config.sliding_window, config.num_hidden_layers = 256, 1
    config._attn_implementation = "spy_blocked"
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.inference_mode():
        model.model(input_ids=torch.randint(2, 300, (1, 8192)), use_cache=False)
    assert layer_masks == [attention.SlidingWindow(256)]
    assert len(kernel_masks) == 8192 // 512
    assert max(m.numel() for m in kernel_masks) <= 512 * (512 + 256)


def test_gemma2_loads_under_the_alias_and_models_must_dispatch(tmp_path, tokenizer):
    """transformers refuses any name with "sdpa" for Gemma 2: load_model retries with the alias. A
    model whose code never calls the attention interface is caught by a probe forward."""
    from pipeline.models.loading import attention_dispatches, load_model
    from tests.support import save_tiny_model

    lm = load_model(str(save_tiny_model(tmp_path, tokenizer, "gemma2")), dtype="float64", device="cpu")
    assert lm.source.attn_implementation == attention.ALIAS and attention_dispatches(lm.model)
    lm.model.set_attn_implementation("eager")  # as custom code that ignores the registered name
    assert not attention_dispatches(lm.model)


def _causal_llama(tokens: int, dtype: torch.dtype) -> torch.nn.Module:
    """One plain causal layer with grouped key/value heads (Llama's shape, tiny): the layer whose
    attention a float32 CUDA run hands to sdpa's math backend."""
    config = tiny_config("llama", 300, max_positions=tokens)
    config.num_hidden_layers = 1
    config._attn_implementation = attention.NAME
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=dtype).eval()


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_causal_blocks_on_the_math_backend_equal_the_plain_computation(dtype, atol):
    """Forced onto the math backend (the path of float32 on CUDA), the causal layer runs in query
    blocks, exact to the dtype's rounding against sdpa's plain math attention."""
    model = _causal_llama(64, dtype)
    ids = torch.randint(2, 300, (2, 61), generator=torch.Generator().manual_seed(5))
    with sdpa_kernel([SDPBackend.MATH]):
        plain = _hidden(model, "sdpa", ids)
        blocked = _hidden(model, attention.NAME, ids)
    assert torch.allclose(blocked, plain, rtol=0, atol=atol)


def test_a_fused_kernel_keeps_the_one_causal_call(monkeypatch):
    """Where a fused kernel takes the causal pass (every CPU run: flash), nothing changes: one call."""
    calls = []
    inner = attention.sdpa_attention_forward
    monkeypatch.setattr(
        attention,
        "sdpa_attention_forward",
        lambda m, q, k, v, mask, **kw: calls.append(q.shape[2]) or inner(m, q, k, v, mask, **kw),
    )
    _hidden(_causal_llama(64, torch.float32), attention.NAME, torch.randint(2, 300, (1, 40)))
    assert calls == [40]


def test_the_math_backend_memory_grows_linearly_with_the_text(monkeypatch):
    """8k -> 16k -> 32k tokens on sdpa's math backend (what float32 on CUDA gets): no score matrix of
    more than QUERY_BLOCK queries, and peak memory (resident, sampled) about doubles per doubling; the
    whole (heads, n, n) matrix would quadruple it (4 GiB at 16k here, 16 GiB at 32k)."""
    from bench.runner import clock

    monkeypatch.setattr(attention, "QUERY_BLOCK", 512)
    scores = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, *args, **kwargs):
        scores.append(query.shape[1] * query.shape[2] * key.shape[2])
        return sdpa(query, key, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    peaks = {}
    for tokens in (8192, 16384, 32768):
        model, ids = _causal_llama(tokens, torch.float32), torch.randint(2, 300, (1, tokens))
        scores.clear()
        with sdpa_kernel([SDPBackend.MATH]), torch.inference_mode(), clock() as peak:
            model.model(input_ids=ids, use_cache=False)
        peaks[tokens] = peak.peak - peak.start
        assert max(scores) <= 4 * 512 * tokens, (tokens, max(scores))  # 4 heads x a block's queries x keys
        if tokens > 8192:
            assert peaks[tokens] < 3 * peaks[tokens // 2], {
                n: f"{p / 2**20:.0f} MiB" for n, p in peaks.items()
            }


def test_grouped_heads_without_a_fused_kernel_take_one_with_repeated_heads(monkeypatch):
    """float32 on CUDA: sdpa's memory-efficient kernel takes float32 but not ``enable_gqa``, so the
    grouped form would go to the math backend. With the heads repeated, one fused call takes the whole
    causal pass (no query blocks), and it equals the plain math computation."""
    monkeypatch.setattr(attention, "QUERY_BLOCK", 16)
    choose = torch._fused_sdp_choice

    def cuda_float32(query, key, value, mask, dropout, causal, enable_gqa=False, *args):
        if enable_gqa:
            return int(SDPBackend.MATH)
        return int(SDPBackend.EFFICIENT_ATTENTION)

    model = _causal_llama(64, torch.float64)
    ids = torch.randint(2, 300, (2, 61), generator=torch.Generator().manual_seed(5))
    with sdpa_kernel([SDPBackend.MATH]):
        plain = _hidden(model, "sdpa", ids)
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch, "_fused_sdp_choice", cuda_float32)
    monkeypatch.setattr(
        torch.nn.functional,
        "scaled_dot_product_attention",
        lambda q, k, *a, **kw: calls.append((q.shape[2], k.shape[1])) or sdpa(q, k, *a, **kw),
    )
    fused = _hidden(model, attention.NAME, ids)
    assert calls == [(61, model.config.num_attention_heads)]  # one call, heads repeated
    assert torch.allclose(fused, plain, rtol=0, atol=1e-12)
    monkeypatch.setattr(torch, "_fused_sdp_choice", choose)
    assert (
        attention.fused_with_repeated_heads(SimpleNamespace(num_key_value_groups=1), *[None] * 3, None)
        is None
    )


def test_queries_after_a_cache_are_described_only_where_the_mask_is_plain_causal():
    block = attention.QUERY_BLOCK
    common = dict(
        batch_size=1, q_length=block + 1, kv_length=block + 301, q_offset=300, allow_is_causal_skip=True
    )
    after = attention.window_mask(mask_function=causal_mask_function, **common)
    assert after == attention.CausalAfterCache(300)
    on_cuda = attention.window_mask(mask_function=causal_mask_function, device="cuda", **common)
    assert on_cuda == after  # described there too: one fused pass (lower_right_causal)
    dense = sdpa_mask(mask_function=causal_mask_function, **common)
    assert torch.equal(after.dense(block + 1, block + 301, torch.device("cpu")), dense)
    others = [  # a window, padding, a short block of queries, another device: transformers' dense mask
        {"mask_function": sliding_window_causal_mask_function(6), "local_size": 6},
        {
            "mask_function": causal_mask_function,
            "attention_mask": torch.ones(1, block + 301, dtype=torch.bool),
        },
        {"mask_function": causal_mask_function, "q_length": block, "kv_length": block + 300},
        {"mask_function": causal_mask_function, "device": "meta"},
    ]
    for other in others:
        assert not isinstance(attention.window_mask(**{**common, **other}), attention.CausalAfterCache)


@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (6, 2)])
def test_attention_after_a_cache_equals_the_dense_masked_computation(heads, kv_heads):
    generator = torch.Generator().manual_seed(heads)
    past, new = 300, attention.QUERY_BLOCK + 90
    query = torch.randn(2, heads, new, 16, generator=generator, dtype=torch.float64)
    key, value = (
        torch.randn(2, kv_heads, past + new, 16, generator=generator, dtype=torch.float64) for _ in "kv"
    )
    mask = attention.CausalAfterCache(past).dense(new, past + new, torch.device("cpu"))
    reference = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, scale=0.3, enable_gqa=True
    )
    got = attention.attention_after_cache(query, key, value, past, 0.3)
    assert torch.allclose(got, reference.transpose(1, 2), rtol=0, atol=1e-12)
    layer = SimpleNamespace(num_key_value_groups=heads // kv_heads)
    lower_right = attention.lower_right_causal(layer, query, key, value, 0.3)  # CUDA's (mask built here)
    assert torch.allclose(lower_right, reference.transpose(1, 2), rtol=0, atol=1e-12)


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_a_prompt_after_its_cached_start_gives_the_whole_prompts_logits(arch):
    """A model's logits for a prompt's last tokens after its first ones are cached (more than a block
    of them: the two-pass attention) equal one pass over the whole prompt, in float64."""
    from transformers import DynamicCache

    model = build_model(arch, 300)
    model.set_attn_implementation(attention.NAME)
    ids = torch.randint(
        2, 300, (1, 200 + attention.QUERY_BLOCK + 40), generator=torch.Generator().manual_seed(3)
    )
    calls = []
    inner = attention.attention_after_cache
    with torch.inference_mode(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(attention, "attention_after_cache", lambda *a: calls.append(a[3]) or inner(*a))
        whole = model(input_ids=ids).logits
        cache = DynamicCache(config=model.config)
        model(input_ids=ids[:, :200], past_key_values=cache, use_cache=True)
        after = model(input_ids=ids[:, 200:], past_key_values=cache, use_cache=True).logits
    assert calls and set(calls) == {200}  # the full-attention layers took the two-pass path
    assert torch.allclose(after, whole[:, 200:], rtol=0, atol=1e-10)


def test_transformers_model_code_is_imported_with_the_first_model_not_with_a_command():
    """`longppl keytokens` and `longppl score` import neither this module nor transformers' model code
    (its distributed tensors, sympy, dynamo, flash-attention integration), nor transformers at all (its
    auto classes, its caches), before a model loads; the name the loader asks for is this module's."""
    heavy = ["pipeline.models.attention", "transformers", "transformers.modeling_utils",
             "torch.distributed.tensor", "sympy", "torch._dynamo",
             "transformers.integrations.flash_attention"]  # fmt: skip
    commands = "pipeline.commands.keytokens, pipeline.commands.score"
    code = f"import sys, {commands}; print([m for m in {heavy} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    assert loading.ATTENTION == attention.NAME
