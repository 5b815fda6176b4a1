"""Shared fixtures, built on ``tests.support``: tiny random-weight models with a real (tiny, trained)
tokenizer, the tiny artifacts made with them, and the fixtures more than one test module asks for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.artifact.reader import load_artifact
from pipeline.artifact.schema import KEY_SPANS, KeyTokenArtifact, new_manifest, settings_fingerprint
from pipeline.artifact.writer import write_artifact
from pipeline.models import loading, logprobs
from pipeline.models.logprobs import TargetScorer
from tests.support import (
    OFFICIAL_K,
    OFFICIAL_SHORT,
    OFFICIAL_TEXTS,
    STAGE1_TEXTS,
    TRAINING_TEXT,
    build_loogle_artifact,
    build_model,
    build_tokenizer,
    compose_keytokens,
    decoded_corpus,
    keytokens_overrides,
    loogle_folder,
    run_keytokens,
    save_dataset,
    save_tiny_model,
)


@pytest.fixture(autouse=True)
def small_attention_blocks(monkeypatch):
    """Query blocks of 8 tokens, so that the tiny models' sequences go through the block-sparse path."""
    from pipeline.models import attention

    monkeypatch.setattr(attention, "QUERY_BLOCK", 8)


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer):
    """A saved tiny Llama checkpoint with the tiny tokenizer: loads like any local model."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny-llama"), tokenizer)


@pytest.fixture(scope="session")
def other_model_dir(tmp_path_factory):
    """A second tiny model with a different tokenizer, as the model being evaluated."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny-other"), build_tokenizer(300), "llama", seed=1)


@pytest.fixture(scope="session")
def tiny_artifact(tmp_path_factory, tiny_model_dir):
    """A stage 1 artifact of the tiny evaluator on three short documents."""
    tmp = tmp_path_factory.mktemp("artifact")
    corpus = tmp / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": f"doc-{i}", "text": t}) + "\n" for i, t in enumerate(STAGE1_TEXTS))
    )
    run_keytokens(compose_keytokens(keytokens_overrides(tiny_model_dir, corpus, tmp)))
    return tmp / "test"


@pytest.fixture(scope="session")
def sharded_artifact(tiny_artifact, tmp_path_factory):
    """The tiny artifact written again in shards of at most 150 rows (``save_key_tokens``): each of its
    three documents in a shard of its own, ``tokens-00000-of-00003.parquet`` and so on."""
    root = tmp_path_factory.mktemp("sharded") / "sharded"
    write_artifact(root, load_artifact(tiny_artifact), shard_rows=150)
    return root


@pytest.fixture(scope="module")
def untruncated_artifact(tiny_model_dir, tmp_path_factory):
    """A stage 1 artifact of one document short enough to be whole (not truncated)."""
    tmp = tmp_path_factory.mktemp("whole")
    corpus = tmp / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "short", "text": "Federal law provides powers. " * 6}) + "\n")
    run_keytokens(compose_keytokens(keytokens_overrides(tiny_model_dir, corpus, tmp)))
    return tmp / "test"


@pytest.fixture(scope="module")
def spans_artifact(tiny_artifact, tmp_path_factory):
    """The tiny artifact's documents and key spans alone, as a key_spans artifact."""
    full = load_artifact(tiny_artifact)
    root = tmp_path_factory.mktemp("key-spans") / "spans-only"
    fingerprint = settings_fingerprint(full.settings, KEY_SPANS)
    manifest = new_manifest(KEY_SPANS, fingerprint, full.settings, {"documents": full.manifest["documents"]})
    write_artifact(root, KeyTokenArtifact(root, manifest, full.documents, None, full.spans))
    return root


@pytest.fixture
def write_corpus(tmp_path):
    def write(rows: list[dict], name: str = "corpus.jsonl") -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        return path

    return write


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The forgetting curve's corpus: the tiny artifact's texts and the tokenizer's training text."""
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    texts = [*STAGE1_TEXTS, " ".join(TRAINING_TEXT)]
    path.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    return path


@pytest.fixture(scope="module")
def held(tokenizer):
    """The tiny Llama in memory, and the same model on the meta device (its weights never loaded)."""
    import torch

    model = build_model("llama", len(tokenizer))
    with torch.device("meta"):
        meta = build_model("llama", len(tokenizer))
    return model, meta


@pytest.fixture
def spy(monkeypatch, tmp_path):
    """Records every model load (its keyword arguments), scorer and head dtype asked for."""
    seen = {"loads": [], "scorers": [], "head_dtypes": []}
    real_init, real_load, real_resolve = (
        TargetScorer.__init__,
        loading.load_model,
        logprobs.resolve_head_dtype,
    )

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        seen["scorers"].append(self)

    def load(spec, **kwargs):
        seen["loads"].append(kwargs)
        return real_load(spec, **kwargs)

    def resolve(name, *args):
        seen["head_dtypes"].append(name)
        return real_resolve(name, *args)

    monkeypatch.setattr(TargetScorer, "__init__", init)
    monkeypatch.setattr(loading, "load_model", load)
    monkeypatch.setattr(logprobs, "resolve_head_dtype", resolve)
    seen["cache_dir"] = str(tmp_path / "cache")
    return seen


@pytest.fixture(scope="module")
def sources(tmp_path_factory, tokenizer, other_model_dir):
    """The official implementation's sources (a pre-tokenized dataset, the tokenizer that decodes it,
    the key spans its code found with the other tiny model as evaluator), and that model's view of them."""
    from longppl.longppl import find_key_token
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("official")
    tokenizer.save_pretrained(root / "decoder")
    texts = [OFFICIAL_TEXTS[0], OFFICIAL_SHORT, OFFICIAL_TEXTS[1], OFFICIAL_TEXTS[2]]
    dataset = save_dataset(root / "dataset", tokenizer, texts)
    evaluator = AutoModelForCausalLM.from_pretrained(other_model_dir).eval()
    evaluator_tokenizer = AutoTokenizer.from_pretrained(other_model_dir)
    spans = root / "key_text" / "Tiny-Evaluator"
    spans.mkdir(parents=True)
    for i, doc in enumerate(decoded_corpus(dataset, root / "decoder")):
        n = len(evaluator_tokenizer(doc.text)["input_ids"])
        d = next(
            w for w in (8, 7, 6) if (n - OFFICIAL_K) % w != 1
        )  # the official code fails on a 1-token last window
        find_key_token(
            doc.text, evaluator, evaluator_tokenizer, OFFICIAL_K, d, str(spans / f"slice_{i}.txt"), 0.5, -30
        )
    return {
        "root": root,
        "dataset": dataset,
        "decoder": root / "decoder",
        "spans": spans,
        "evaluator": other_model_dir,
    }


@pytest.fixture(scope="session")
def loogle_dir(tmp_path_factory) -> Path:
    """A LooGLE folder of two tasks whose first document is in both (as the sample's article is)."""
    return loogle_folder(tmp_path_factory.mktemp("loogle"))


@pytest.fixture(scope="session")
def loogle_artifact(tmp_path_factory, tiny_model_dir, loogle_dir) -> Path:
    return build_loogle_artifact(tmp_path_factory.mktemp("loogle-artifact"), tiny_model_dir, loogle_dir)


@pytest.fixture(scope="session")
def whole_loogle_artifact(tmp_path_factory, tiny_model_dir, loogle_dir) -> Path:
    """The same documents whole (the tiny model's 512 positions hold them)."""
    out = tmp_path_factory.mktemp("whole-loogle-artifact")
    return build_loogle_artifact(out, tiny_model_dir, loogle_dir, "max_tokens=null")
