"""Bits per byte: equal to a direct computation on tiny models; PPL and LongPPL unchanged beside it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pipeline.artifact import reader as artifacts
from pipeline.models.loading import load_model
from pipeline.results.score import RESULTS_VERSION
from pipeline.score import bpb
from tests.support import ROOT, build_tokenizer, compose_config, direct_logprobs, save_tiny_model, score


def test_utf8_lengths_and_covered_bytes():
    text = "a é 中😀\x00"
    lengths = bpb.utf8_lengths(text)
    assert lengths.tolist() == [len(c.encode()) for c in text] == [1, 1, 2, 1, 3, 4, 1]
    # overlapping spans (byte fallback) count their characters once; empty spans count nothing
    offsets = np.array([[4, 5], [4, 5], [5, 6], [2, 2], [0, 1]])
    assert bpb.covered_bytes(lengths, offsets) == 3 + 4 + 1
    assert bpb.covered_bytes(lengths, np.zeros((0, 2), dtype=np.int64)) == 0
    every = np.array([[0, 2], [2, 3], [3, 6], [6, 7]])
    assert bpb.text_bytes(lengths, every, np.ones(4, bool)) == len(text.encode())
    assert bpb.text_bytes(lengths, every, np.array([False, True, True, True])) == len(text[2:].encode())
    assert bpb.text_bytes(lengths, every, np.array([True, True, True, False])) == len(text[:6].encode())
    assert bpb.text_bytes(lengths, every, np.zeros(4, bool)) == 0


def direct_bits_per_byte(model_dir, artifact, add_bos: bool, limit: int | None = None) -> dict:
    """Per document and corpus, by brute force: -log2 P over the scored tokens (one plain forward
    pass), over the UTF-8 bytes of the characters they spell (the key tokens: found by containment
    in a key span, their characters collected one by one)."""
    art = artifacts.load_artifact(artifact)
    lm = load_model(str(model_dir), dtype="float64", device="cpu")
    out, totals = {}, np.zeros(4)
    for doc in art.documents.to_pylist():
        text = doc["text"]
        enc = lm.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        prefix = [lm.bos_token_id] if add_bos else []
        n = len(enc["input_ids"]) if limit is None else min(len(enc["input_ids"]), limit - len(prefix))
        bits = -direct_logprobs(lm.model, [*prefix, *enc["input_ids"][:n]]) / math.log(2)
        spans = enc["offset_mapping"][len(prefix) == 0 : n]  # without BOS the first token is not scored
        first = 0 if add_bos else spans[0][0]
        all_bytes = len(text[first : spans[-1][1]].encode("utf-8"))
        key_spans = [
            (s["char_start"], s["char_end"]) for s in art.spans.to_pylist() if s["doc_id"] == doc["doc_id"]
        ]
        key = [any(a <= s and e <= b for a, b in key_spans) for s, e in spans]
        chars = sorted({c for (s, e), k in zip(spans, key, strict=True) if k for c in range(s, e)})
        key_bytes = len("".join(text[c] for c in chars).encode("utf-8"))
        key_bits = float(bits[np.array(key)].sum())
        out[doc["doc_id"]] = (bits.sum() / all_bytes, key_bits / key_bytes if key_bytes else None)
        totals += (bits.sum(), all_bytes, key_bits, key_bytes)
    out["corpus"] = (totals[0] / totals[1], totals[2] / totals[3])
    return out


@pytest.mark.parametrize("add_bos", [True, False])
def test_bits_per_byte_equal_a_direct_computation(other_model_dir, tiny_artifact, tmp_path, add_bos):
    row = score(other_model_dir, tiny_artifact, tmp_path, f"add_bos={str(add_bos).lower()}")
    direct = direct_bits_per_byte(other_model_dir, tiny_artifact, add_bos)
    assert row["schema_version"] == RESULTS_VERSION and row["corpus"]["n_key_tokens"] > 0
    for doc in row["documents"]:
        expected_all, expected_key = direct[doc["doc_id"]]
        assert doc["bpb"] == pytest.approx(expected_all, abs=1e-9)
        assert (doc["key_bpb"] is None) == (expected_key is None)
        if expected_key is not None:
            assert doc["key_bpb"] == pytest.approx(expected_key, abs=1e-9)
    assert row["corpus"]["bpb"] == pytest.approx(direct["corpus"][0], abs=1e-9)
    assert row["corpus"]["key_bpb"] == pytest.approx(direct["corpus"][1], abs=1e-9)
    # the same sums as PPL and LongPPL: exp(bits * ln 2 * bytes / tokens)
    c = row["corpus"]
    assert c["ppl"] == pytest.approx(
        math.exp(c["bpb"] * math.log(2) * c["n_bytes"] / c["n_tokens"]), rel=1e-12
    )
    assert c["longppl"] == pytest.approx(
        math.exp(c["key_bpb"] * math.log(2) * c["n_key_bytes"] / c["n_key_tokens"]), rel=1e-12
    )


def test_bits_per_byte_of_a_truncated_prefix(tiny_artifact, tmp_path):
    """A document longer than the model: the bytes are those of the prefix that was scored."""
    short_model = save_tiny_model(tmp_path / "short", build_tokenizer(300), "llama", max_positions=64)
    row = score(short_model, tiny_artifact, tmp_path, "allow_truncation=true")
    direct = direct_bits_per_byte(short_model, tiny_artifact, add_bos=True, limit=64)
    assert all(d["truncated"] for d in row["documents"])
    for doc in row["documents"]:
        assert doc["bpb"] == pytest.approx(direct[doc["doc_id"]][0], abs=1e-9)
        assert doc["n_bytes"] < len(artifacts.load_artifact(tiny_artifact).texts()[doc["doc_id"]].encode())


# ----------------------------------------------------------------------------------------------
# Existing numbers unchanged: the recorded leaderboard result of the real SmolLM2


@pytest.mark.integration
def test_recorded_numbers_of_the_default_artifact_are_unchanged(tmp_path):
    """The default artifact made on this machine is the same artifact as the one the record was scored on
    (discrete contents exactly, values within the measured tolerance: ``artifact.identity``; never its
    exact bytes, which differ between CPUs), and SmolLM2 on its first document gives the recorded PPL,
    LongPPL and LongPPL-soft (``conf/refresh/recorded.jsonl``) within the refresh's tolerance and the
    recorded counts exactly."""
    from pipeline.artifact.identity import Identity, differences

    cfg = compose_config("leaderboard_refresh", [])
    artifact = ROOT / str(cfg.artifact)
    if not (artifact / "manifest.json").exists():
        pytest.skip(f"no default artifact at {artifact}: run `make keytokens` first")
    art = artifacts.load_artifact(artifact)
    recorded = json.loads((ROOT / cfg.recorded).read_text().splitlines()[0])
    assert art.manifest["fingerprint"] == cfg.fingerprint == recorded["artifact"]["fingerprint"]
    assert art.identity.discrete == cfg.discrete
    expected_identity = Identity.from_record(cfg.fingerprint, recorded["artifact"]["identity"])
    assert differences(art.identity, expected_identity) == []
    first = next(artifacts.iter_documents(art))
    expected = next(d for d in recorded["documents"] if d["doc_id"] == first.doc_id)

    from pipeline.models.logprobs import TargetScorer
    from pipeline.score.documents import score_document
    from pipeline.settings import ScoreSettings

    lm = load_model("smollm2-135m", dtype="float32", device="cpu")
    scorer = TargetScorer(lm.model, head_chunk=recorded["settings"]["head_chunk"])
    got = score_document(lm, scorer, first, ScoreSettings()).summary()
    for key in ("ppl", "longppl", "longppl_soft"):  # within the refresh's tolerance (float32 on CPU)
        assert got[key] == pytest.approx(expected[key], rel=float(cfg.tolerance)), key
    for key in ("n_tokens", "n_scored", "n_key_tokens", "key_chars", "covered_key_chars", "truncated"):
        assert got[key] == expected[key], key
    assert got["n_bytes"] == len(first.text.encode("utf-8"))
