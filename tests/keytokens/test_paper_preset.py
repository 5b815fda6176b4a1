"""preset=paper: the paper's corpus (the same texts for every evaluator) and the official conventions."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import torch

from pipeline.jobs.keytokens import KeyTokensJob
from tests.support import compose_keytokens, run_keytokens

TEXTS = [
    "The committee reported the bill. " * 6,
    "short",
    "Federal law provides a variety of powers for the President. " * 5,
    "line 7: REGISTER_CONTENT is 4512. " * 7,
    "The Congressional Research Service reports on appropriations. " * 4,
]


def test_paper_preset_composes_the_official_setup():
    cfg = compose_keytokens(["preset=paper"])
    assert cfg.corpus.name == "govreport_paper"
    assert cfg.corpus.dataset == "emozilla/govreport-test-tokenized"
    assert (cfg.corpus.tokenized_with, cfg.corpus.min_tokenized_len) == ("NousResearch/Llama-2-7b-hf", 16384)
    assert (cfg.corpus.max_ids, cfg.corpus.limit) == (32767, 50)
    assert cfg.short_window_bos is False and cfg.add_bos is True
    assert (cfg.K, cfg.d, cfg.alpha, cfg.beta, cfg.gamma) == (4096, 1024, 2.0, -2.0, 5.0)
    # the selection is the corpus's, in reference-tokenizer tokens: none per evaluator
    assert (cfg.max_tokens, cfg.min_tokens, cfg.num_documents) == (None, 0, None)
    assert (cfg.dtype, cfg.device) == ("bfloat16", "cuda")
    settings = KeyTokensJob.from_config(compose_keytokens(["preset=paper", "device=cpu"]))
    assert (
        settings.corpus.tokenized_with == "NousResearch/Llama-2-7b-hf"
        and settings.compute.head_dtype == "auto"
    )


@pytest.mark.parametrize(
    "order", [["preset=paper", "corpus=govreport_hub"], ["corpus=govreport_hub", "preset=paper"]]
)
def test_another_corpus_can_still_be_chosen(order):
    cfg = compose_keytokens(order)
    assert cfg.corpus.dataset == "ccdv/govreport-summarization" and cfg.short_window_bos is False


@pytest.fixture(scope="module")
def pretokenized(tmp_path_factory, tokenizer):
    """A local copy in the emozilla format: input_ids by the reference tokenizer and tokenized_len."""
    import datasets

    root = tmp_path_factory.mktemp("paper-corpus")
    ids = [[tokenizer.bos_token_id, *tokenizer(t, add_special_tokens=False)["input_ids"]] for t in TEXTS]
    lengths = [len(i) for i in ids]
    datasets.Dataset.from_dict({"input_ids": ids, "tokenized_len": lengths}).save_to_disk(root / "dataset")
    tokenizer.save_pretrained(root / "tokenizer")
    return root, ids


def test_every_evaluator_scores_the_same_texts(
    pretokenized, tiny_model_dir, other_model_dir, tmp_path, tokenizer
):
    """Two evaluators with different tokenizers: the same documents, cut by the reference tokenizer
    (rows with tokenized_len >= 30, the first 3, input_ids[:40]) and never again by the evaluator."""
    root, ids = pretokenized
    texts = {}
    for name, model in (("same", tiny_model_dir), ("other", other_model_dir)):
        manifest = run_keytokens(
            compose_keytokens(
                [
                    "preset=paper",
                    "evaluator=local",
                    f"evaluator.spec={model}",
                    f"corpus.dataset={root / 'dataset'}",
                    f"corpus.tokenized_with={root / 'tokenizer'}",
                    "corpus.min_tokenized_len=30",
                    "corpus.max_ids=40",
                    "corpus.limit=3",
                    f"output_dir={tmp_path}",
                    f"name={name}",
                    "K=8",
                    "d=8",
                    "dtype=float64",
                    "device=cpu",
                    "progress=false",
                ]
            )
        )
        documents = pq.read_table(tmp_path / name / "documents.parquet").to_pylist()
        assert not any(d["truncated"] for d in documents)
        texts[name] = [(d["doc_id"], d["text"]) for d in documents]
        settings = manifest["settings"]
        assert settings["short_window_bos"] is False and settings["max_tokens"] is None
        assert (settings["dtype"], settings["head_dtype"], settings["device"]) == (
            "float64",
            "float64",
            "cpu",
        )
        assert settings["corpus"]["tokenized_with"] == str(root / "tokenizer")
        assert settings["corpus"]["max_ids"] == 40
    kept = [i for i in ids if len(i) >= 30][:3]
    assert len(kept) == 3 and any(len(i) > 40 for i in kept)  # one row is cut by the reference tokenizer
    assert texts["same"] == texts["other"]
    assert [t for _, t in texts["same"]] == [tokenizer.batch_decode([i[:40]])[0] for i in kept]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA")
def test_the_paper_preset_without_a_gpu_stops_at_once_unless_the_cpu_is_chosen():
    """No silent bfloat16 on the CPU: one line, before the corpus or the evaluator loads (offline, a
    Hub corpus would otherwise fail first); device=cpu is the visible choice."""
    import subprocess
    import sys

    from tests.support import ROOT

    cmd = [sys.executable, "-m", "pipeline.commands.keytokens", "preset=paper", "evaluator=llama3.1-8b"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and lines == [
        "error: device=cuda but no CUDA GPU is visible (preset=paper and preset=long ask for one): "
        "pass device=cpu to run on the CPU anyway (in dtype=bfloat16: slow, and its rounding is not a GPU's)"
    ], proc.stderr
    settings = KeyTokensJob.from_config(compose_keytokens(["preset=paper", "device=cpu"]))
    assert (settings.compute.device, settings.compute.dtype) == ("cpu", "bfloat16")
