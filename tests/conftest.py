"""Shared fixtures: tiny random-weight models with a real (tiny, trained) tokenizer, built from configs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]

TRAINING_TEXT = [
    "Federal law provides a variety of powers for the President to use in response to crisis.",
    "The Congressional Research Service reports on appropriations, emergencies and statutes.",
    "line 1: REGISTER_CONTENT is 4512. line 2: REGISTER_CONTENT is 2290.",
    "Unicode: café, naïve, 中文字符, emoji 😀👩‍👩‍👧, e\u0301, CRLF\r\n and tabs\t.",
] * 4


def build_tokenizer():
    """A byte-level BPE tokenizer trained in milliseconds; handles any text via bytes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<bos>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(TRAINING_TEXT, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>")


def tiny_config(arch: str, vocab_size: int, max_positions: int = 1024):
    from transformers import Gemma3TextConfig, LlamaConfig, Qwen2Config

    common = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    if arch == "llama":
        return LlamaConfig(**common)
    if arch == "qwen2":
        return Qwen2Config(**common)
    if arch == "gemma3":
        return Gemma3TextConfig(
            **common,
            head_dim=8,
            sliding_window=6,
            final_logit_softcapping=3.0,
            layer_types=["sliding_attention", "full_attention"],
        )
    raise ValueError(arch)


def build_model(arch: str, vocab_size: int, max_positions: int = 1024, seed: int = 0):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config = tiny_config(arch, vocab_size, max_positions)
    config._attn_implementation = "sdpa"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float64)
    # Larger weights than the default init, so that log-probs depend strongly on the context.
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8.0)
    return model.eval()


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer):
    """A saved tiny Llama checkpoint with the tiny tokenizer: loads like any local model."""
    path = tmp_path_factory.mktemp("tiny-llama")
    build_model("llama", len(tokenizer), max_positions=512).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def write_corpus(tmp_path):
    def write(rows: list[dict], name: str = "corpus.jsonl") -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        return path

    return write


def compose_stage1(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return compose("keytokens", overrides=overrides)
