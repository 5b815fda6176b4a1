"""Causal LMs with seeded random weights, built from configs, for the tests and the benchmarks: the
tiny shapes the tests run (``tiny_config``), Llama-3.1-8B's real shape (``LLAMA31_8B``, its 128k rope
scaling ``LLAMA3_ROPE``) and the builder they all use (``random_model``). The same seed gives the
same weights, so every test and benchmark that builds one gives the same numbers."""

from __future__ import annotations

import contextlib
from typing import Any

LLAMA31_8B: dict[str, Any] = {  # meta-llama/Llama-3.1-8B's config.json
    "vocab_size": 128256,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
LLAMA3_ROPE |= {"original_max_position_embeddings": 8192, "rope_theta": 500000.0}
# Two layers of hidden 64 (4 query heads of 16 over 2 key/value heads): Llama-3.1-8B's shape, tiny.
SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
SMALL |= {"num_key_value_heads": 2, "head_dim": 16}
# Llama-3.1-8B by name, full and tiny (its vocabulary, norms and untied head; the tiny body).
LLAMA31_SHAPES = {"llama3.1-8b": LLAMA31_8B, "tiny": {**LLAMA31_8B, **SMALL}}
TINY = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
TINY |= {"num_key_value_heads": 2, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 1}
# What each architecture adds to the tiny shape: Gemma's local and global layers (a window of 6, a
# soft-capped head; Gemma 2 soft-caps attention logits too, which sdpa cannot compute), Mistral v0.1's
# window on every layer.
GEMMA = {"head_dim": 8, "sliding_window": 6, "final_logit_softcapping": 3.0}
GEMMA |= {"layer_types": ["sliding_attention", "full_attention"]}
ARCH_FIELDS: dict[str, dict[str, Any]] = {
    "llama": {},
    "qwen2": {},
    "gemma3": GEMMA,
    "gemma2": {**GEMMA, "attn_logit_softcapping": 2.0, "query_pre_attn_scalar": 8},
    "mistral": {"head_dim": 8, "sliding_window": 6},
}


def config(arch: str, **fields: Any) -> Any:
    """The transformers config of ``arch`` (llama, qwen2, gemma2, gemma3, mistral) with ``fields``."""
    from transformers import Gemma2Config, Gemma3TextConfig, LlamaConfig, MistralConfig, Qwen2Config

    classes = {
        "llama": LlamaConfig,
        "qwen2": Qwen2Config,
        "gemma3": Gemma3TextConfig,
        "gemma2": Gemma2Config,
        "mistral": MistralConfig,
    }
    if arch not in classes:
        raise ValueError(f"no random-weight config for architecture {arch!r}: one of {sorted(classes)}")
    return classes[arch](**fields)


def tiny_config(arch: str, vocab_size: int, max_positions: int = 1024, **changes: Any) -> Any:
    """The tests' tiny model of ``arch`` (hidden 32, two layers, BOS 0, EOS and padding 1), its
    architecture's own fields added (``ARCH_FIELDS``), then ``changes``."""
    fields = {"vocab_size": vocab_size, **TINY, "max_position_embeddings": max_positions}
    return config(arch, **{**fields, **ARCH_FIELDS.get(arch, {}), **changes})


def random_model(
    config: Any,
    seed: int = 0,
    dtype: Any = None,
    scale: float = 1.0,
    device: str | None = None,
    attn: str | None = None,
) -> Any:
    """A causal LM of ``config`` initialised after ``torch.manual_seed(seed)``, in ``dtype`` (default:
    transformers', float32) and on ``device`` (built there, not moved), every weight times ``scale``
    (larger weights: log-probs that depend strongly on the context); ``attn``: its attention
    implementation. In eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    if attn is not None:
        config._attn_implementation = attn
    torch.manual_seed(seed)
    placed = torch.device(device) if device else contextlib.nullcontext()
    with placed:
        model = AutoModelForCausalLM.from_config(config, **({"dtype": dtype} if dtype else {}))
    if scale != 1.0:
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(scale)
    return model.eval()
