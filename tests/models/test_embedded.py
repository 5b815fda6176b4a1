"""Integration: the real package-shipped models, on short texts from the shipped GovReport sample."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pipeline.artifact import reader as artifacts
from pipeline.models.loading import load_model
from pipeline.text.tokenization import encode_with_offsets
from tests.support import ROOT, compose_keytokens, run_keytokens

pytestmark = pytest.mark.integration
SAMPLE = ROOT / "data" / "govreport-sample.jsonl"


@pytest.fixture(scope="module")
def sample_docs():
    return [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def gemma():
    return load_model("gemma3-270m", dtype="float32", device="cpu")


def test_both_embedded_tokenizers_reproduce_every_shipped_document(gemma, sample_docs):
    smol = load_model("smollm2-135m", dtype="float32", device="cpu")
    for lm in (gemma, smol):
        for doc in sample_docs:
            enc = encode_with_offsets(lm.tokenizer, doc["text"])
            assert enc.offsets_from == "tokenizer"
            assert enc.offsets[-1, 1] == len(doc["text"])
            assert (np.diff(enc.offsets[:, 0]) >= 0).all()
    assert gemma.context_length == 32768 and smol.context_length == 8192
    assert gemma.source.file_sha256 and gemma.source.kind == "embedded"


def test_stage1_with_the_embedded_evaluator(gemma, write_corpus, tmp_path, sample_docs):
    corpus = write_corpus([{"id": d["id"], "text": d["text"][:1500]} for d in sample_docs[:2]])
    cfg = compose_keytokens(
        [
            "corpus=local",
            f"corpus.path={corpus}",
            f"output_dir={tmp_path}",
            "name=gemma",
            "K=64",
            "d=32",
            "max_tokens=256",
            "progress=false",
            "device=cpu",
        ]
    )
    manifest = run_keytokens(cfg)
    art = artifacts.load_artifact(tmp_path / "gemma")
    assert manifest["settings"]["evaluator"]["spec"] == "gemma3-270m"
    assert art.documents.num_rows == 2 and all(n <= 256 for n in art.documents["n_tokens"].to_pylist())
    # LCL of the first document against one plain forward pass of the model (float32 tolerance)
    rows = art.tokens.filter(art.tokens["doc_id"].to_numpy(zero_copy_only=False) == sample_docs[0]["id"])
    ids = [gemma.bos_token_id, *rows["token_id"].to_pylist()]
    with torch.inference_mode():
        logits = gemma.model(input_ids=torch.tensor([ids])).logits[0, :-1].double()
    direct = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None]).squeeze(1).numpy()
    np.testing.assert_allclose(rows["long_logprob"].to_numpy(), direct, atol=2e-3)
    check_alignment_against_official(art)


def check_alignment_against_official(art):
    """Real case: Gemma's key spans on SmolLM2's tokens select what the official cal_overlap selects."""
    official = pytest.importorskip("longppl.longppl")
    from pipeline.artifact.reader import iter_documents
    from pipeline.text.alignment import hard_key_mask

    smol = load_model("smollm2-135m", dtype="float32", device="cpu")
    checked = 0
    for doc in iter_documents(art):
        offsets = encode_with_offsets(smol.tokenizer, doc.text).offsets
        for alpha, beta in [(2.0, -2.0), (0.5, -5.0), (0.1, -10.0)]:
            starts, ends = doc.spans_at(alpha, beta)
            ours = np.flatnonzero(hard_key_mask(offsets, starts, ends))
            slices = list(zip(starts.tolist(), ends.tolist(), strict=True))
            theirs = official.cal_overlap(offsets.tolist(), slices)
            assert ours.tolist() == [i + 1 for i in theirs]  # cal_overlap returns loss indices, i - 1
            checked += len(ours)
    assert checked > 20
