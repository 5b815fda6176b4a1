"""A converted checkpoint's tokenizer in its fast form (``pipeline.models.fast_tokenizer``): taken only
where a verdict says it is transformers' tokenizer exactly (class, backend, every attribute), the verdict
keyed by the folder's files and the libraries' versions; anything else loads as transformers does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pipeline.models import fast_tokenizer
from pipeline.models.fast_tokenizer import fast_form, form_key, load_tokenizer, state
from pipeline.text.tokenization import encode_with_offsets
from tests.support import ROOT

TEXTS = ["the cat sat on the mat.", "  Two  spaces, Ünïcödé 你好 and <bos> inside\n\nlines", ""]


@pytest.fixture
def gemma_like(tmp_path) -> Path:
    """A folder with a tiny tokenizer of Gemma's class (``GemmaTokenizer``: transformers rebuilds its
    backend from the vocabulary on load), as a GGUF conversion saves it."""
    from transformers import GemmaTokenizer

    vocab = {t: i for i, t in enumerate(["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"])}
    vocab |= {f"<0x{b:02X}>": len(vocab) + b for b in range(256)}
    for piece in "▁abcdefghijklmnopqrstuvwxyzTU.,":
        vocab.setdefault(piece, len(vocab))
    merges = [("▁", "t"), ("h", "e"), ("▁t", "he")]
    vocab |= {a + b: len(vocab) + i for i, (a, b) in enumerate(merges)}
    folder = tmp_path / "converted"
    GemmaTokenizer(vocab=vocab, merges=merges).save_pretrained(folder)
    return folder


def spy_transformers_load(monkeypatch) -> list[str]:
    """The folders transformers' own load (``AutoTokenizer.from_pretrained``) was asked for."""
    from transformers import AutoTokenizer

    calls: list[str] = []
    inner = AutoTokenizer.from_pretrained

    def counted(location, *args, **kwargs):
        calls.append(str(location))
        return inner(location, *args, **kwargs)

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", counted)
    return calls


def encodings(tokenizer) -> list:
    found = []
    for text in TEXTS:
        enc = encode_with_offsets(tokenizer, text)
        found.append((enc.ids.tolist(), enc.offsets.tolist(), tokenizer(text)["input_ids"]))
    return found


def test_the_fast_form_is_taken_once_known_to_be_the_same(gemma_like, tmp_path, monkeypatch):
    calls = spy_transformers_load(monkeypatch)
    first = load_tokenizer(gemma_like, tmp_path / "cache")
    assert type(first).__name__ == "GemmaTokenizer" and calls == [str(gemma_like)]
    verdict = tmp_path / "cache" / "tokenizers" / f"{form_key(gemma_like)}.json"
    assert json.loads(verdict.read_text())["same"] is True
    second = load_tokenizer(gemma_like, tmp_path / "cache")
    assert calls == [str(gemma_like)]  # no second load by transformers
    assert type(second) is type(first) and state(second) == state(first)
    assert encodings(second) == encodings(first)


def test_a_changed_file_or_a_verdict_of_different_loads_as_transformers_does(
    gemma_like, tmp_path, monkeypatch
):
    calls = spy_transformers_load(monkeypatch)
    cache = tmp_path / "cache"
    load_tokenizer(gemma_like, cache)
    config = gemma_like / "tokenizer_config.json"
    config.write_text(json.dumps(json.loads(config.read_text()) | {"model_max_length": 4096}))
    changed = load_tokenizer(gemma_like, cache)  # another key: compared anew
    assert len(calls) == 2 and changed.model_max_length == 4096
    verdict = cache / "tokenizers" / f"{form_key(gemma_like)}.json"
    for written in ('{"same": false}', "not json"):
        verdict.write_text(written)
        load_tokenizer(gemma_like, cache)
    assert len(calls) == 4


def test_a_fast_form_that_differs_is_never_taken(gemma_like, tmp_path, monkeypatch):
    """A form whose state is not transformers' (here its padding side) is recorded as different, and
    transformers' load runs every time."""
    calls = spy_transformers_load(monkeypatch)

    def other(folder):
        tokenizer = fast_form(folder)
        tokenizer.padding_side = "right"
        return tokenizer

    monkeypatch.setattr(fast_tokenizer, "fast_form", other)
    for _ in range(2):
        assert load_tokenizer(gemma_like, tmp_path / "cache").padding_side == "left"
    assert len(calls) == 2
    verdict = tmp_path / "cache" / "tokenizers" / f"{form_key(gemma_like)}.json"
    assert json.loads(verdict.read_text())["same"] is False


def test_a_fast_form_that_no_longer_builds_falls_back_to_transformers(gemma_like, tmp_path, monkeypatch):
    calls = spy_transformers_load(monkeypatch)
    load_tokenizer(gemma_like, tmp_path / "cache")

    def broken(folder):
        raise ValueError("no such class")

    monkeypatch.setattr(fast_tokenizer, "fast_form", broken)
    assert type(load_tokenizer(gemma_like, tmp_path / "cache")).__name__ == "GemmaTokenizer"
    assert len(calls) == 2


def test_the_key_holds_every_file_a_load_reads_but_weights_and_records(gemma_like):
    key = form_key(gemma_like)
    (gemma_like / "model.safetensors").write_bytes(b"weights")
    (gemma_like / "longppl-verified.json").write_text("{}")
    assert form_key(gemma_like) == key
    (gemma_like / "chat_template.jinja").write_text("{{ messages }}")
    assert form_key(gemma_like) != key


@pytest.mark.integration
def test_the_embedded_gemma_tokenizer_is_the_same_both_ways(tmp_path):
    """Gemma 3's 262k-entry tokenizer of the embedded model's conversion: the fast form has transformers'
    state and gives the same tokens and offsets on every shipped document."""
    from transformers import AutoTokenizer

    from pipeline.models.sources import prepare, resolve_source

    folder = Path(prepare(resolve_source("gemma3-270m"), None, None)[0])
    slow, fast = AutoTokenizer.from_pretrained(str(folder)), fast_form(folder)
    assert type(fast).__name__ == "GemmaTokenizer" and state(fast) == state(slow)
    for line in (ROOT / "data" / "govreport-sample.jsonl").read_text(encoding="utf-8").splitlines():
        text = json.loads(line)["text"]
        a, b = encode_with_offsets(slow, text), encode_with_offsets(fast, text)
        assert np.array_equal(a.ids, b.ids) and np.array_equal(a.offsets, b.offsets)
