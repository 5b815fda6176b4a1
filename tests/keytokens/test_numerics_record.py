"""What a key-token artifact's fingerprint records of how its numbers were computed: a 16-bit or GPU run
records its GEMM shapes and GPUs (a resume with other kernels stops), a CPU run in float32 or float64
records none of it and its tables do not depend on them (beyond float32 rounding), so the default
artifact keeps its fingerprint."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from pipeline.errors import PipelineError
from pipeline.models import placement
from tests.support import (
    ROOT,
    STAGE1_TEXTS,
    compose_config,
    compose_keytokens,
    keytokens_overrides,
    run_keytokens,
)

BLOCKS = ("head_chunk=7", "vocab_tile=50", "window_batch_tokens=1")


@pytest.fixture
def stage1(tiny_model_dir, write_corpus, tmp_path):
    corpus = write_corpus([{"id": f"doc-{i}", "text": t} for i, t in enumerate(STAGE1_TEXTS)])

    def run(name: str, *extra: str) -> tuple[dict, dict]:
        cfg = compose_keytokens(
            [*keytokens_overrides(tiny_model_dir, corpus, tmp_path, *extra), f"name={name}"]
        )
        manifest = run_keytokens(cfg)
        return manifest, pq.read_table(tmp_path / name / "tokens.parquet").to_pydict()

    return run


def test_cpu_tables_in_float32_do_not_depend_on_the_blocks(stage1):
    """Other head blocks, vocabulary tiles and window batches: the same fingerprint (no ``numerics``),
    the same key tokens, log-probs equal to float32 rounding (float64: tests/models/test_logprobs.py)."""
    default, tokens = stage1("default", "dtype=float32")
    other, other_tokens = stage1("blocks", "dtype=float32", *BLOCKS)
    assert "numerics" not in default["settings"] and default["fingerprint"] == other["fingerprint"]
    assert tokens["is_key"] == other_tokens["is_key"]
    for column in ("long_logprob", "short_logprob"):
        a, b = np.array(tokens[column], dtype=float), np.array(other_tokens[column], dtype=float)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5, equal_nan=True)


def test_a_16_bit_run_records_its_blocks_and_resumes_only_with_them(stage1):
    manifest, _ = stage1("bf16", "dtype=bfloat16")
    assert manifest["settings"]["numerics"] == {
        "head_chunk": 16,
        "vocab_tile": 16384,
        "window_batch_tokens": 1,
    }
    with pytest.raises(
        PipelineError, match=r"holds a run with other settings \(numerics: .*window_batch_tokens"
    ):
        stage1("bf16", "dtype=bfloat16", "window_batch_tokens=64")


def test_a_gpu_run_records_its_gpus(monkeypatch):
    """A model whose head runs on cuda:0 through its accelerate hook (this machine has no GPU: the
    name comes from a stand-in for torch.cuda.get_device_name)."""
    from tests.support import build_model

    model = build_model("llama", 97)

    class Hook:
        execution_device = 0

    model.lm_head._hf_hook = Hook()
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: f"NVIDIA H100 80GB HBM3 ({torch.device(d)})")
    record = placement.gpu_record(model)
    assert record["gpus"] == ["NVIDIA H100 80GB HBM3 (cuda:0)"] and "cuda" in record
    assert record["matmul"] == {
        "allow_tf32": False,
        "allow_bf16_reduced_precision_reduction": True,
        "allow_fp16_reduced_precision_reduction": True,
    }
    assert placement.gpu_record(build_model("llama", 97)) == {}


@pytest.mark.integration
def test_the_default_artifacts_fingerprint_is_unchanged():
    """The settings record of `make keytokens` (the embedded evaluator on the shipped sample, CPU,
    float32) gives the fingerprint conf/refresh/embedded.yaml pins, without scoring a token."""
    from pipeline.jobs.keytokens import KeyTokensJob
    from pipeline.keytokens.selection import select
    from pipeline.text.corpus import load_corpus

    settings = KeyTokensJob.from_config(compose_keytokens([]))
    lm = settings.evaluator.load(settings.compute)
    selection = select(
        load_corpus(settings.corpus),
        lm,
        settings.definition,
        settings.documents,
        settings.corpus,
        settings.compute,
    )
    pinned = compose_config("leaderboard_refresh", []).fingerprint
    assert pinned == "9bb93536f3b233883009a9e49885471a3f171ddafc71eb78f2ba640e770f00fe"
    assert "numerics" not in selection.record and selection.fingerprint == pinned
    assert (ROOT / "conf/refresh/embedded.yaml").read_text().count(pinned) == 1
