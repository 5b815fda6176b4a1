"""Models spread by a device map (accelerate's hooks) or offloaded score exactly like the plain model."""

from __future__ import annotations

import warnings

import pytest
import torch
from transformers import AutoModelForCausalLM

from pipeline.errors import PipelineError
from pipeline.models import placement
from pipeline.models.logprobs import TargetScorer
from pipeline.models.top1 import top1_hits
from tests.support import build_model

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


GiB = 2**30


@pytest.fixture
def eight_gpus(monkeypatch):
    """Eight 80 GiB GPUs with 79 GiB free each, and 500 GiB of available host memory."""
    import psutil

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda g: (79 * GiB, 80 * GiB))
    memory = psutil.virtual_memory()
    monkeypatch.setattr(psutil, "virtual_memory", lambda: memory._replace(available=500 * GiB))


def test_max_memory_leaves_headroom_on_each_gpu_and_offers_the_host(eight_gpus):
    """A rank's slice of 4 GPUs: each GPU's free memory less 10% of its total (8 GiB), and the
    slice's half of 90% of the host's available memory; the whole node when no slice is given."""
    budget = placement.max_memory([4, 5, 6, 7])
    assert list(budget) == [4, 5, 6, 7, "cpu"]
    assert all(budget[g] == 79 * GiB - 8 * GiB for g in (4, 5, 6, 7))
    assert budget["cpu"] == int(500 * GiB * 0.9 * 0.5)
    kwargs = placement.from_pretrained_placement(torch.device("cuda", 4), "auto", [4, 5, 6, 7])
    assert kwargs == {"device_map": "auto", "max_memory": budget}
    everything = placement.from_pretrained_placement(torch.device("cuda", 0), "auto", None)["max_memory"]
    assert list(everything) == [*range(8), "cpu"] and everything["cpu"] == int(500 * GiB * 0.9)


def test_a_small_gpu_keeps_at_least_2_gib_free(monkeypatch, eight_gpus):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda g: (15 * GiB, 16 * GiB))
    assert placement.max_memory([0])[0] == 13 * GiB


def test_what_does_not_fit_the_gpus_goes_to_host_memory_not_disk():
    """accelerate's device map of a model a little larger than its GPU budget (a tiny Llama on the
    meta device; accelerate plans for GPU 0 whether or not it is there): with a ``cpu`` entry the
    rest goes to host memory; with the old budget (every GPU's whole memory, no ``cpu``) it went
    straight to disk."""
    from accelerate import infer_auto_device_map, init_empty_weights
    from transformers import AutoModelForCausalLM

    from studies.random_models import tiny_config

    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(tiny_config("llama", 4000))
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    layers = ["LlamaDecoderLayer"]
    with warnings.catch_warnings():  # the offloaded layers' 32-byte buffers do not fit either
        warnings.simplefilter("ignore")
        old = infer_auto_device_map(model, max_memory={0: size}, no_split_module_classes=layers)
        new = infer_auto_device_map(
            model, max_memory={0: size, "cpu": 10 * size}, no_split_module_classes=layers
        )
    assert "disk" in old.values()
    assert set(new.values()) == {0, "cpu"}


def test_the_checks_forwards_run_on_one_cpu_thread_and_the_count_comes_back():
    one_thread_on_cpu = placement.one_thread_on_cpu
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with one_thread_on_cpu(torch.device("cpu")):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), one_thread_on_cpu(torch.device("cpu")):
            raise RuntimeError("a check that fails")
        assert torch.get_num_threads() == 2
        with one_thread_on_cpu(torch.device("meta")):  # another device: torch's CPU threads are not its own
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
