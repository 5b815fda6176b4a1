"""Models spread by a device map (accelerate's hooks) or offloaded score exactly like the plain model."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from pipeline.errors import PipelineError
from pipeline.models import placement
from pipeline.models.logprobs import TargetScorer
from pipeline.models.top1 import top1_hits
from tests.conftest import build_model

VOCAB = 97
REST = {"model.layers": "cpu", "model.norm": "cpu", "model.rotary_emb": "cpu"}
MAPS = {
    "head on disk": {"model": "cpu", "lm_head": "disk"},
    "embeddings and head on disk": {"model.embed_tokens": "disk", **REST, "lm_head": "disk"},
    "embeddings on disk": {"model.embed_tokens": "disk", **REST, "lm_head": "cpu"},
    "layers on disk": {"model.embed_tokens": "cpu", **REST, "model.layers": "disk", "lm_head": "cpu"},
}
# A tied head must sit with the embeddings (the model's own forward fails otherwise).
CASES = [("llama", where) for where in MAPS if where != "layers on disk"] + [
    ("gemma3", "embeddings and head on disk"),
    ("gemma3", "layers on disk"),
]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Tiny float64 checkpoints: Llama (separate head) and Gemma 3 (head tied to the embeddings)."""
    root = tmp_path_factory.mktemp("placement")
    for arch in ("llama", "gemma3"):
        build_model(arch, VOCAB).save_pretrained(root / arch)
    return root


def load(path, device_map=None, offload=None):
    kwargs = {"device_map": device_map, "offload_folder": str(offload)} if device_map else {}
    return AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float64, attn_implementation="blocked_sdpa", **kwargs
    ).eval()


@pytest.mark.parametrize(("arch", "where"), CASES)
def test_device_mapped_model_scores_like_the_plain_model(saved, tmp_path, arch, where):
    """The head follows its weight: an offloaded head (weights on meta between calls) is loaded by
    its accelerate hook; a tied head (Gemma 3) uses the embeddings wherever they are."""
    plain = load(saved / arch)
    mapped = load(saved / arch, MAPS[where], tmp_path)
    assert mapped.hf_device_map and placement.describe(mapped, torch.device("cpu")) in (
        "cpu,disk",
        "disk,cpu",
    )
    offloaded = mapped.lm_head.weight.device.type == "meta"
    assert offloaded == ("head" in where)
    seq = torch.randint(2, VOCAB, (40,), generator=torch.Generator().manual_seed(7))
    for tile in (10, None):
        reference = TargetScorer(plain, head_chunk=7, vocab_tile=tile)
        scorer = TargetScorer(mapped, head_chunk=7, vocab_tile=tile)
        scorer.check_against_full_forward()
        got, want = scorer.score(seq, torch.arange(39)), reference.score(seq, torch.arange(39))
        assert (got - want).abs().max().item() < 1e-9
        hidden = scorer.hidden_states(seq[None])[0, :-1]
        assert (top1_hits(scorer, hidden, seq[1:]) == top1_hits(reference, hidden, seq[1:])).all()
    assert mapped.lm_head.weight.device.type == ("meta" if offloaded else "cpu")  # offloaded again


def test_head_on_meta_without_a_hook_is_a_clear_error():
    model = build_model("llama", VOCAB)
    model.lm_head.weight = torch.nn.Parameter(torch.empty_like(model.lm_head.weight, device="meta"))
    scorer = TargetScorer(model, vocab_tile=10)
    with pytest.raises(PipelineError, match="meta device and nothing loads them"):
        scorer.score(torch.arange(2, 12), torch.arange(9))


def test_execution_device_follows_the_hook():
    model = build_model("llama", VOCAB)
    assert placement.execution_device(model.lm_head) == torch.device("cpu")

    class Hook:
        execution_device = 3

    model.lm_head._hf_hook = Hook()
    assert placement.execution_device(model.lm_head) == torch.device("cuda", 3)


def test_placement_arguments():
    """One GPU: weights straight onto it (device_map {"": device}), never through host memory."""
    cuda1 = torch.device("cuda", 1)
    assert placement.from_pretrained_placement(cuda1, None, None) == {"device_map": {"": "cuda:1"}}
    assert placement.from_pretrained_placement(torch.device("cpu"), None, None) == {}
    assert placement.from_pretrained_placement(torch.device("cpu"), "auto", None) == {"device_map": "auto"}
