"""What only a CUDA GPU can show (`make test-gpu`; skipped elsewhere): a device map split across the GPU
and the CPU, the bfloat16 self-check with GPU kernels, the attention's memory, NCCL with two ranks."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from pipeline.models import attention
from pipeline.models.logprobs import TargetScorer
from tests.conftest import build_model, tiny_config

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA GPU (make test-gpu on a GPU machine)"
    ),
]
VOCAB = 97


REST = {"model.layers": "cpu", "model.norm": "cpu", "model.rotary_emb": "cpu"}
SPLITS = [
    ("llama", {"model": 0, "lm_head": "cpu"}),  # the head offloaded to host memory, run on cuda:0
    ("llama", {"model": "cpu", "lm_head": 0}),  # the body offloaded
    ("gemma3", {"model.embed_tokens": 0, **REST, "lm_head": 0}),  # tied head on the GPU, layers offloaded
]


@pytest.mark.parametrize(("arch", "device_map"), SPLITS)
def test_device_map_split_across_gpu_and_cpu(tmp_path, arch, device_map):
    """A device map across cuda:0 and the CPU: the same log-probs as the plain model on the CPU, in
    float64 (accelerate runs offloaded modules on cuda:0, their weights on meta between calls)."""
    build_model(arch, VOCAB).save_pretrained(tmp_path)
    kwargs = {"dtype": torch.float64, "attn_implementation": attention.NAME}
    plain = AutoModelForCausalLM.from_pretrained(tmp_path, **kwargs).eval()
    mapped = AutoModelForCausalLM.from_pretrained(tmp_path, device_map=device_map, **kwargs).eval()
    seq = torch.randint(2, VOCAB, (40,), generator=torch.Generator().manual_seed(0))
    scorer = TargetScorer(mapped, head_chunk=7, vocab_tile=10)
    scorer.check_against_full_forward()
    want = TargetScorer(plain, head_chunk=7, vocab_tile=10).score(seq, torch.arange(39))
    assert (scorer.score(seq, torch.arange(39)) - want).abs().max().item() < 1e-9


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize("head_dtype", [torch.bfloat16, torch.float32])
def test_bfloat16_self_check_on_gpu(arch, head_dtype):
    """GPU GEMMs of other shapes round logits differently: the rounding-aware check still passes."""
    model = build_model(arch, 300, seed=3).to("cuda", torch.bfloat16)
    TargetScorer(model, head_chunk=5, vocab_tile=64, head_dtype=head_dtype).check_against_full_forward()


@pytest.mark.parametrize("tokens", [8192, 16384])
def test_sliding_window_attention_memory_on_gpu(tokens):
    """No (n x n) mask: peak memory of a forward pass stays far below n^2 bytes."""
    config = tiny_config("mistral", 300, max_positions=tokens)
    config.sliding_window, config.num_hidden_layers = 512, 1
    config._attn_implementation = attention.NAME
    model = AutoModelForCausalLM.from_config(config).to("cuda").eval()
    ids = torch.randint(2, 300, (1, tokens), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    with torch.inference_mode():
        model.model(input_ids=ids, use_cache=False)
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - before < tokens * tokens // 8


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_two_nccl_ranks_bind_their_own_gpus(tiny_model_dir, tmp_path):
    from tests.test_distributed import WORDS, keytokens_command, run_cmd, tables

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": f"d{i}", "text": " ".join(WORDS * (3 + i))}) + "\n" for i in range(4))
    )
    out = {}
    for nproc in (1, 2):
        cmd = keytokens_command(tiny_model_dir, corpus, tmp_path / f"n{nproc}", nproc=nproc)
        done = run_cmd([*[c for c in cmd if c != "device=cpu"], "device=cuda"])
        assert done.returncode == 0, done.stderr[-3000:]
        out[nproc] = tables(tmp_path / f"n{nproc}" / "test")
    manifest = json.loads((tmp_path / "n2" / "test" / "manifest.json").read_text())
    assert manifest["run"]["devices"] == ["cuda:0", "cuda:1"]
    assert manifest["settings"]["device"] == "cuda"
    assert out[1] == out[2]
