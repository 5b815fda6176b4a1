"""``compile=``: a compute setting (off, on, auto) that compiles each decoder layer, keeps the kernels in
the cache folder, is recorded where the head blocks are (the manifest's numerics, a results line's
settings) and leaves an eager run's record, and so the default artifact's fingerprint, as it was."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch

from pipeline.errors import PipelineError
from pipeline.models import attention, compilation
from pipeline.models.logprobs import scorer_for
from pipeline.settings import Compute, parse
from tests.support import STAGE1_TEXTS, build_model, compose_keytokens, keytokens_overrides, run_keytokens

CPU, CUDA = torch.device("cpu"), torch.device("cuda", 0)


def test_auto_compiles_stage_1_on_cuda_with_enough_texts_only():
    enough = compilation.AUTO_MIN_TEXTS
    assert compilation.wanted("auto", CUDA, enough) and not compilation.wanted("auto", CUDA, enough - 1)
    assert not compilation.wanted("auto", CPU, 10 * enough) and not compilation.wanted("auto", CUDA, None)
    assert not compilation.wanted("auto", CUDA, enough, device_map=True)
    assert compilation.wanted("on", CPU, 1) and not compilation.wanted("off", CUDA, 10 * enough)


def test_the_setting_reads_yaml_and_hydra_booleans_and_refuses_anything_else():
    assert (
        parse(Compute, {"compile": True}).compile == "on"
        and parse(Compute, {"compile": False}).compile == "off"
    )
    assert Compute().compile == "auto"
    with pytest.raises(
        PipelineError, match=r"setting compile='maybe': Input should be 'auto', 'on' or 'off'"
    ):
        parse(Compute, {"compile": "maybe"})


def test_compile_on_compiles_each_layer_with_its_kernels_in_the_cache_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    model = build_model("llama", 97)
    assert compilation.record(model) == {}
    scorer_for(model, Compute(compile="auto"))  # a run that does not say how many texts: eager
    assert not compilation.is_compiled(model)
    scorer_for(model, Compute(compile="on", cache_dir=str(tmp_path)))
    layers = model.get_decoder().layers
    assert all(compilation.is_compiled(layer) for layer in layers) and compilation.record(model) == {
        "compile": "on"
    }
    assert compilation.kernel_cache(tmp_path / "other") == tmp_path / "compile"  # torch's variable, now set
    with pytest.raises(PipelineError, match="no list of decoder layers to compile"):
        compilation.compile_layers(torch.nn.Linear(2, 2), tmp_path)


def test_a_compiled_16_bit_run_is_another_artifact_and_an_eager_one_is_unchanged(
    tiny_model_dir, write_corpus, tmp_path, monkeypatch
):
    """torch.compile with its eager backend (the graphs traced, no kernels built): the manifest's
    numerics say ``compile: on`` and the fingerprint moves; ``compile=off`` and ``auto`` on the CPU record
    what a run recorded before the setting existed."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "kernels"))
    corpus = write_corpus([{"id": f"doc-{i}", "text": t} for i, t in enumerate(STAGE1_TEXTS[:1])])

    def manifest(name: str, *extra: str) -> dict:
        overrides = keytokens_overrides(tiny_model_dir, corpus, tmp_path, "dtype=bfloat16", *extra)
        return run_keytokens(compose_keytokens([*overrides, f"name={name}"]))

    eager, auto, compiled = manifest("off", "compile=off"), manifest("auto"), manifest("on", "compile=on")
    assert "compile" not in eager["settings"]["numerics"] and eager["fingerprint"] == auto["fingerprint"]
    assert compiled["settings"]["numerics"] == {**eager["settings"]["numerics"], "compile": "on"}
    assert compiled["fingerprint"] != eager["fingerprint"]


def test_a_compiled_layer_is_one_graph_for_every_layer_with_eagers_values():
    """sdpa's kernel choice is a constant of the trace (no graph break), asked without the layer itself,
    and blocked_sdpa's call count stays out of the graph: two layers share one graph (no recompilation)."""
    layers = [SimpleNamespace(num_key_value_groups=2, is_causal=True, head_dim=16) for _ in range(2)]
    n = attention.QUERY_BLOCK + 8
    query, key, value = torch.randn(1, 4, n, 16), torch.randn(1, 2, n, 16), torch.randn(1, 2, n, 16)
    torch._dynamo.reset()
    compiled = torch.compile(attention.blocked_sdpa_forward, backend="eager", fullgraph=True)
    with torch._dynamo.config.patch(error_on_recompile=True):
        outputs = [compiled(layer, query, key, value, None)[0] for layer in layers]
    expected = attention.blocked_sdpa_forward(layers[0], query, key, value, None)[0]
    assert all(torch.allclose(out, expected, atol=1e-6) for out in outputs)
