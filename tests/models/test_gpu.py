"""What only a CUDA GPU can show (`make test-gpu`, which fails without one; `make test` skips these): a
device map split across the GPU and the CPU, the bfloat16 self-check with GPU kernels on a model wide
enough to round differently (and a wrong head that fails it), the float32 head as one GEMM with
float32 output, the attention's memory, two workers on two GPUs."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from pipeline.errors import PipelineError
from pipeline.models import attention
from pipeline.models.float32_head import float32_logits, float32_output_supported
from pipeline.models.logprobs import TargetScorer
from pipeline.models.precision import full_precision_reductions
from studies import random_models as random_weights
from tests.support import build_model
from tests.support import sum_order_bound as bound

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
    """A device map across cuda:0 and the CPU: the same log-probs as the plain model on cuda:0, in
    float64 (accelerate runs offloaded modules on cuda:0, their weights on meta between calls).

    Against the plain model on the CPU the log-probs differ by up to 2.8e-5 (measured on an H100):
    transformers computes a float64 model's RMSNorm and rotary embedding in float32
    (tests/models/test_numeric_causes.py lists those steps), and CUDA's float32 kernels round them otherwise
    than the CPU's (test_float32_steps_round_otherwise_on_cuda). Like with like, the split itself
    changes nothing."""
    build_model(arch, VOCAB).save_pretrained(tmp_path)
    kwargs = {"dtype": torch.float64, "attn_implementation": attention.NAME}
    plain = AutoModelForCausalLM.from_pretrained(tmp_path, **kwargs).to("cuda:0").eval()
    mapped = AutoModelForCausalLM.from_pretrained(tmp_path, device_map=device_map, **kwargs).eval()
    same_buffers(mapped, plain)
    seq = torch.randint(2, VOCAB, (40,), generator=torch.Generator().manual_seed(0))
    scorer = TargetScorer(mapped, head_chunk=7, vocab_tile=10)
    scorer.check_against_full_forward()
    want = TargetScorer(plain, head_chunk=7, vocab_tile=10).score(seq.to("cuda:0"), torch.arange(39))
    got = scorer.score(seq, torch.arange(39))
    assert (got.cpu() - want.cpu()).abs().max().item() < 1e-9


def same_buffers(model: torch.nn.Module, reference: torch.nn.Module) -> None:
    """Give ``model`` the non-parameter buffers of ``reference`` (the rotary embedding's inverse
    frequencies: float32 values that a model initialised on another device may round otherwise)."""
    wanted = dict(reference.named_buffers())
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name in wanted and buffer.device.type != "meta":
                buffer.copy_(wanted[name].to(buffer.device))


def test_float32_steps_round_otherwise_on_cuda():
    """The float32 steps inside a float64 model (RMSNorm's mean of squares and rsqrt, the rotary
    embedding's cos and sin) give the CPU's values to float32 rounding on CUDA, not to float64
    rounding: the cause of the CPU/CUDA difference of float64 models. The same steps done in float64
    agree to float64 rounding."""
    model = build_model("llama", VOCAB).to(torch.float64).eval()
    x = torch.randn(
        1, 64, model.config.hidden_size, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )
    positions = torch.arange(0, 4096, 64)[None]
    eps32, eps64 = torch.finfo(torch.float32).eps, torch.finfo(torch.float64).eps
    norm, rotary = model.model.norm, model.model.rotary_emb
    norm_cpu, norm_gpu = norm(x), norm.to("cuda")(x.to("cuda")).cpu()
    assert ((norm_gpu - norm_cpu).abs() <= 4 * eps32 * norm_cpu.abs()).all()
    rms = [
        (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)) for v in (x, x.to("cuda"))
    ]
    assert ((rms[1].cpu() - rms[0]).abs() <= 32 * eps64 * rms[0].abs()).all()
    for cpu, gpu in zip(
        rotary(x, positions), rotary.to("cuda")(x.to("cuda"), positions.to("cuda")), strict=True
    ):
        assert (gpu.cpu() - cpu).abs().max().item() <= 4 * eps32  # cos and sin, each at most 1
    angles = positions[0, :, None].double() * rotary.inv_freq.double().cpu()
    assert ((angles.cuda().cos().cpu() - angles.cos()).abs() <= 8 * eps64).all()


def wide_bfloat16_llama() -> torch.nn.Module:
    """One layer of Llama-3-8B's width (hidden 4096) over a 32000-entry vocabulary on cuda:0, in
    bfloat16, its head scaled so that logits reach 8 to 16 (bfloat16 ulps of 0.0625): GEMMs of
    other shapes than the model's own round its logits differently (a model of hidden size 32 and
    300 entries rounds alike whatever the shapes, and its check could not fail for rounding)."""
    config = random_weights.config(
        "llama",
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=4096,
        num_hidden_layers=1,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=256,
    )
    model = random_weights.random_model(config, attn=attention.NAME).to("cuda", torch.bfloat16)
    with torch.no_grad():
        model.lm_head.weight.mul_(4)
    return model


SHAPES = [(1, None), (3, 1000), (5, 4096), (11, 32000)]  # (head_chunk, vocab_tile)


@pytest.mark.parametrize("head_dtype", [torch.bfloat16, torch.float32])
def test_bfloat16_self_check_on_a_wide_model(head_dtype):
    """GPU GEMMs of other shapes round the logits differently (at least one of these shapes differs
    from the model's own logits somewhere), and the rounding-aware check passes for every shape."""
    model = wide_bfloat16_llama()
    seq = (torch.arange(12) * 7919 % 32000).to("cuda")
    with full_precision_reductions(), torch.inference_mode():
        logits = model(input_ids=seq[None], use_cache=False).logits[0, :-1]
        hidden = model.model(input_ids=seq[None], use_cache=False).last_hidden_state[0, :-1]
    assert 8 <= logits.float().abs().max().item() < 64
    differs = []
    for chunk, tile in SHAPES:
        like = TargetScorer(model, head_chunk=chunk, vocab_tile=tile, head_dtype=torch.bfloat16)
        with full_precision_reductions(), torch.inference_mode(), like.head_ready():
            tiles = torch.cat([t for _, t in like.logit_tiles(hidden[:chunk])], dim=1)
        differs.append(int((tiles != logits[:chunk]).sum()))
        TargetScorer(
            model, head_chunk=chunk, vocab_tile=tile, head_dtype=head_dtype
        ).check_against_full_forward()
    assert any(differs), f"every head shape rounded like the model's own logits ({differs}): widen the model"


def test_a_wrong_head_fails_the_check_on_a_wide_model():
    """The negative case: each vocabulary tile shifted by one entry (a tiling bug) fails the check."""
    scorer = TargetScorer(wide_bfloat16_llama(), head_chunk=5, vocab_tile=4096, head_dtype=torch.bfloat16)
    real = scorer.logit_tiles
    scorer.logit_tiles = lambda hidden: ((v, t.roll(1, dims=1)) for v, t in real(hidden))
    with pytest.raises(PipelineError, match="output head"):
        scorer.check_against_full_forward()


def test_the_float32_head_is_one_gemm_with_float32_output():
    """On a GPU of compute capability 8.0 and up the float32 head of a bfloat16 model is
    ``torch.mm(..., out_dtype=torch.float32)``: equal to the GEMM on upcast operands to float32
    rounding (the products are exact in float32; only the order of the sums differs)."""
    model = wide_bfloat16_llama()
    assert float32_output_supported(torch.device("cuda", 0), torch.bfloat16)
    hidden = torch.randn(64, 4096, device="cuda").to(torch.bfloat16)
    weight = model.lm_head.weight
    bias = torch.randn(32000, device="cuda").to(torch.bfloat16)
    upcast = torch.nn.functional.linear(hidden.float(), weight.float(), bias.float())
    mixed = float32_logits(hidden, weight, bias)
    assert mixed.dtype == torch.float32
    assert (mixed - upcast).abs().max().item() <= 1e-5 * upcast.abs().max().item()
    scorer = TargetScorer(model, head_dtype=torch.float32)
    assert scorer.uses_float32_output(hidden)
    seq = (torch.arange(40) * 7919 % 32000).to("cuda")
    upcast_scorer = TargetScorer(model, head_dtype=torch.float32)
    upcast_scorer.float32_output = False
    got, want = scorer.score(seq, torch.arange(39)), upcast_scorer.score(seq, torch.arange(39))
    got, want = got.cpu(), want.cpu()
    assert ((got - want).abs() <= reordering_bound(scorer, seq, want)).all()


def reordering_bound(scorer: TargetScorer, seq: torch.Tensor, logprobs: torch.Tensor) -> torch.Tensor:
    """How far the log-probs of the two float32 heads may differ, position by position
    (``tests.support.sum_order_bound``: a log-prob is z_t - logsumexp(z), both terms move by at most
    max_j |dz_j|, plus float32 rounding), with dz the two GEMMs' difference on the same hidden states.
    Measured on an H100: log-probs of 13 to 34 nats differed by up to 1.6e-4, the logits by up to
    1e-5 of their largest (16): the old 1e-4 was below what the other order of sums allows."""
    with torch.inference_mode():
        hidden = scorer.hidden_states(seq[None])[0][:-1]
        weight = scorer.model.lm_head.weight
        mixed, upcast = float32_logits(hidden, weight, None), hidden.float() @ weight.float().t()
        return bound(mixed.cpu(), upcast.cpu(), logprobs.cpu())


def peak_forward_bytes(model, tokens: int) -> int:
    """Peak memory allocated by one forward pass of ``tokens`` tokens above what was allocated before
    it, after a warm-up pass of the same length (kernels, cuBLAS's workspace and the allocator's
    blocks exist before the measurement)."""
    ids = torch.randint(2, 300, (1, tokens), device="cuda")
    with torch.inference_mode():
        model.model(input_ids=ids, use_cache=False)  # warm-up
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        model.model(input_ids=ids, use_cache=False)
        torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def test_sliding_window_attention_memory_on_gpu(monkeypatch):
    """No (n x n) mask: peak memory grows linearly with n (x2 per doubling plus a constant, never the
    x4 of a quadratic term) and stays far below the n^2 bytes of one dense boolean mask. The
    pipeline's own query blocks (512), not the tests' 8-token ones (conftest)."""
    monkeypatch.setattr(attention, "QUERY_BLOCK", 512)
    config = random_weights.tiny_config("mistral", 300, 32768, sliding_window=512, num_hidden_layers=1)
    model = random_weights.random_model(config, attn=attention.NAME).to("cuda")
    peaks = {n: peak_forward_bytes(model, n) for n in (8192, 16384, 32768)}
    print({n: f"{peak / 2**20:.1f} MiB" for n, peak in peaks.items()})
    assert peaks[16384] < 2.5 * peaks[8192] and peaks[32768] < 2.5 * peaks[16384]
    assert peaks[32768] < 32768 * 32768 // 8


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_two_workers_bind_their_own_gpus(tiny_model_dir, tmp_path):
    """Two tasks on two workers of this machine, each worker its own GPU (gpus_per_task=1): the same
    tables as one task."""
    from tests.support import DISTRIBUTED_WORDS as WORDS
    from tests.support import keytokens_command, run_cmd
    from tests.support import table_bytes as tables

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": f"d{i}", "text": " ".join(WORDS * (3 + i))}) + "\n" for i in range(4))
    )
    out = {}
    for nproc in (1, 2):
        engine = [f"tasks={nproc}", f"workers={nproc}", "gpus_per_task=1"]
        cmd = keytokens_command(tiny_model_dir, corpus, tmp_path / f"n{nproc}", *engine)
        done = run_cmd([*[c for c in cmd if c != "device=cpu"], "device=cuda"])
        assert done.returncode == 0, done.stderr[-3000:]
        out[nproc] = tables(tmp_path / f"n{nproc}" / "test")
    manifest = json.loads((tmp_path / "n2" / "test" / "manifest.json").read_text())
    assert manifest["run"]["devices"] == ["cuda:0", "cuda:1"]
    assert manifest["settings"]["device"] == "cuda"
    assert out[1] == out[2]
