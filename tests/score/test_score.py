"""Stage 2 on tiny models: exact metrics, agreement with the official package, bad input."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from pipeline.artifact import reader as artifacts
from pipeline.errors import PipelineError
from pipeline.models.loading import load_model
from tests.support import build_tokenizer, direct_logprobs, save_tiny_model, score


def test_metrics_equal_a_direct_computation(other_model_dir, tiny_artifact, tmp_path):
    row = score(other_model_dir, tiny_artifact, tmp_path)
    art = artifacts.load_artifact(tiny_artifact)
    lm = load_model(str(other_model_dir), dtype="float64", device="cpu")
    all_nll, key_nll, soft_num, soft_den = [], [], 0.0, 0.0
    for doc in art.documents.to_pylist():
        text = doc["text"]
        enc = lm.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        nll = -direct_logprobs(lm.model, [lm.bos_token_id, *enc["input_ids"]])
        spans = [
            (s["char_start"], s["char_end"]) for s in art.spans.to_pylist() if s["doc_id"] == doc["doc_id"]
        ]
        evals = [t for t in art.tokens.to_pylist() if t["doc_id"] == doc["doc_id"]]
        char_w = {}
        for t in evals:  # brute force: per character, the weights of the evaluator tokens covering it
            for c in range(t["char_start"], t["char_end"]):
                char_w.setdefault(c, []).append(t["soft_weight"])
        for (s, e), x in zip(enc["offset_mapping"], nll, strict=True):
            all_nll.append(x)
            if any(a <= s and e <= b for a, b in spans):
                key_nll.append(x)
            ws = [np.nan if None in char_w.get(c, [None]) else np.mean(char_w[c]) for c in range(s, e)]
            ws = [w for w in ws if not np.isnan(w)]
            if ws:
                soft_num += np.mean(ws) * x
                soft_den += np.mean(ws)
    corpus = row["corpus"]
    assert corpus["n_tokens"] == len(all_nll) and corpus["n_key_tokens"] == len(key_nll) > 0
    assert corpus["ppl"] == pytest.approx(np.exp(np.mean(all_nll)), rel=1e-12)
    assert corpus["longppl"] == pytest.approx(np.exp(np.mean(key_nll)), rel=1e-12)
    assert corpus["longppl_soft"] == pytest.approx(np.exp(soft_num / soft_den), rel=1e-10)
    assert (
        corpus["grid"]["alpha=2,beta=-2"]["n_key_tokens"] <= corpus["grid"]["alpha=1,beta=-2"]["n_key_tokens"]
    )
    line = json.loads((tmp_path / "scores.jsonl").read_text().splitlines()[-1])
    assert (
        line["result_id"] == row["result_id"]
        and line["artifact"]["fingerprint"] == art.manifest["fingerprint"]
    )
    assert line["model"]["weights_sha256"] and line["settings"]["add_bos"] is True


def test_own_tokenizer_maps_key_tokens_onto_themselves(tiny_model_dir, tiny_artifact, tmp_path):
    """With the evaluator's own tokenizer the mapping is the identity, except for tokens that share
    a character with another token (byte fallback, or byte-level BPE splitting a character): a
    character span cannot split them, so they become key together."""
    from pipeline.text.alignment import hard_key_mask

    art = artifacts.load_artifact(tiny_artifact)
    s = art.settings
    row = score(tiny_model_dir, tiny_artifact, tmp_path, f"grid=[[{s['alpha']},{s['beta']}]]")
    expected = shared = 0
    for doc in art.documents["doc_id"].to_pylist():
        toks = [t for t in art.tokens.to_pylist() if t["doc_id"] == doc]
        spans = [sp for sp in art.spans.to_pylist() if sp["doc_id"] == doc]
        offsets = np.array([(t["char_start"], t["char_end"]) for t in toks])
        mask = hard_key_mask(offsets, [sp["char_start"] for sp in spans], [sp["char_end"] for sp in spans])
        is_key = np.array([t["is_key"] for t in toks])
        # tokens that share no character with another token (byte-level BPE can split a character)
        prev_end = np.concatenate([[0], np.maximum.accumulate(offsets[:-1, 1])])
        next_start = np.concatenate([offsets[1:, 0], [offsets[-1, 1]]])
        unique = (offsets[:, 0] >= prev_end) & (offsets[:, 1] <= next_start) & (offsets[:, 0] < offsets[:, 1])
        assert (mask[unique] == is_key[unique]).all() and (mask >= is_key).all()
        assert unique.sum() > 0.7 * len(toks)
        shared += int((~unique).sum())
        expected += int(mask.sum())
    assert shared > 0  # the emoji document has byte-fallback tokens
    assert row["corpus"]["n_key_tokens"] == expected
    assert row["corpus"]["grid"][f"alpha={s['alpha']:g},beta={s['beta']:g}"]["n_key_tokens"] == expected
    assert row["corpus"]["key_char_coverage"] == 1.0


def test_agrees_with_the_official_package(other_model_dir, tiny_artifact, tmp_path):
    official = pytest.importorskip("longppl.longppl")
    row = score(other_model_dir, tiny_artifact, tmp_path, "add_bos=false")
    art = artifacts.load_artifact(tiny_artifact)
    lm = load_model(str(other_model_dir), dtype="float64", device="cpu")
    for doc, ours in zip(art.documents.to_pylist(), row["documents"], strict=True):
        spans = [s for s in art.spans.to_pylist() if s["doc_id"] == doc["doc_id"]]
        path = tmp_path / f"{doc['doc_id']}.txt"
        path.write_text(";".join(f"[{s['char_start']}, {s['char_end']}]" for s in spans))
        theirs = official.compute_longppl(
            doc["text"], lm.model, None, tokenizer=lm.tokenizer, save_path=str(path)
        )
        assert ours["ppl"] == pytest.approx(float(theirs["ppl"]), rel=1e-4)
        assert ours["n_key_tokens"] == theirs["n_key_token"]
        assert ours["longppl"] == pytest.approx(float(theirs["longppl"]), rel=1e-4)


def test_context_limit_names_the_row(other_model_dir, tiny_artifact, tmp_path):
    full = score(other_model_dir, tiny_artifact, tmp_path)
    limited = score(other_model_dir, tiny_artifact, tmp_path, "context_limit=32")
    assert limited["model_name"].endswith("@ctx32")
    assert limited["corpus"]["n_tokens"] == full["corpus"]["n_tokens"]
    assert limited["corpus"]["ppl"] != full["corpus"]["ppl"]


def test_several_limits_in_one_call_are_each_limits_score(other_model_dir, tiny_artifact):
    """``score_texts`` at several limits without full context (the ladder's tests always have it): each
    limit's result is ``score``'s at that ``context_limit`` to every digit; its own checks are `make
    score`'s."""
    from dataclasses import replace

    from pipeline.score.engine import score as score_call
    from pipeline.score.engine import score_texts, texts_of
    from pipeline.settings import Compute, ScoreSettings

    lm = load_model(str(other_model_dir), dtype="float64", device="cpu")
    artifact, compute, settings = (
        artifacts.open_artifact(str(tiny_artifact)),
        Compute(head_chunk=16),
        ScoreSettings(),
    )
    texts = texts_of(artifact, lm, settings, documents=2)
    for limits in [(16,), (32, 500)]:  # windows only (aligned on the windows' log-probs); a limit all fit
        scored = score_texts(texts, lm, compute, limits)
        for limit, got in zip(limits, scored.results, strict=True):
            want = score_call(artifact, lm, replace(settings, context_limit=limit), compute, documents=2)
            assert (got.corpus, got.documents, got.settings) == (want.corpus, want.documents, want.settings)
    limited, key_n = scored.key_limited, scored.key_n
    assert scored.copied == [0, 2] and limited[:, 1].tolist() == [0, 0]
    assert (limited[:, 0] > 0).all() and key_n.tolist() == [
        d["n_key_tokens"] for d in scored.results[0].documents
    ]
    with pytest.raises(PipelineError, match=r"^context_limit=600 exceeds .*: set context_limit<=511$"):
        score_texts(texts, lm, compute, (16, 600))
    truncating = texts_of(artifact, lm, replace(settings, allow_truncation=True), documents=2)
    with pytest.raises(PipelineError, match=r"^several context limits score whole documents"):
        score_texts(truncating, lm, compute, (16, 32))


def test_document_longer_than_the_model(tiny_artifact, tmp_path):
    short_model = save_tiny_model(tmp_path / "short", build_tokenizer(300), "llama", max_positions=64)
    with pytest.raises(PipelineError, match=r"more than its context of 64.*allow_truncation=true"):
        score(short_model, tiny_artifact, tmp_path)
    row = score(short_model, tiny_artifact, tmp_path, "allow_truncation=true")
    assert row["corpus"]["n_truncated"] == 3 and all(d["truncated"] for d in row["documents"])
    assert all(d["n_scored"] == 63 for d in row["documents"])


def test_normalising_tokenizer_is_an_error(tiny_artifact, tmp_path):
    from tokenizers import normalizers

    lower = save_tiny_model(tmp_path / "lower", build_tokenizer(300, normalizers.Lowercase()), "llama")
    with pytest.raises(PipelineError, match="does not reproduce the text"):
        score(lower, tiny_artifact, tmp_path)


@pytest.fixture
def artifact_copy(tiny_artifact, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_artifact, copy)
    return copy


def test_altered_artifact_file(artifact_copy, other_model_dir, tmp_path):
    path = artifact_copy / "spans.parquet"
    path.write_bytes(path.read_bytes()[:-1] + b"\x00")
    with pytest.raises(PipelineError, match=r"spans\.parquet does not match the sha256"):
        score(other_model_dir, artifact_copy, tmp_path)


def test_missing_artifact_file(artifact_copy, other_model_dir, tmp_path):
    (artifact_copy / "tokens.parquet").unlink()
    with pytest.raises(PipelineError, match=r"missing tokens\.parquet"):
        score(other_model_dir, artifact_copy, tmp_path)


def test_unknown_schema_version(artifact_copy, other_model_dir, tmp_path):
    manifest = json.loads((artifact_copy / "manifest.json").read_text())
    manifest["schema_version"] = 99
    (artifact_copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PipelineError, match="schema version 99"):
        score(other_model_dir, artifact_copy, tmp_path)


def test_missing_artifact(other_model_dir, tmp_path):
    with pytest.raises(PipelineError, match="run `make keytokens` first"):
        score(other_model_dir, tmp_path / "nothing", tmp_path)


def test_artifact_from_the_hub_cache(tiny_artifact, other_model_dir, tmp_path, monkeypatch):
    """The real snapshot_download path, answered from a local Hub cache (no network)."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "datasets--org--keytokens"
    shutil.copytree(tiny_artifact, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    row = score(other_model_dir, "hf://datasets/org/keytokens", tmp_path)
    assert row["artifact"]["source"] == {
        "hub": "org/keytokens",
        "revision": commit,
        "requested_revision": None,
    }
    with pytest.raises(
        PipelineError, match=r"could not download key-token dataset 'org/missing'.*artifact=DIR"
    ):
        score(other_model_dir, "hf://datasets/org/missing@v1", tmp_path)


def test_a_non_finite_logprob_is_an_error(other_model_dir, tiny_artifact, tmp_path, monkeypatch):
    """A NaN from the model (overflow in a low precision) is never a skipped token."""
    import pipeline.score.documents as engine

    real = engine.context_limited_logprobs

    def with_nan(*args, **kwargs):
        out = real(*args, **kwargs)
        out[5] = np.nan
        return out

    monkeypatch.setattr(engine, "context_limited_logprobs", with_nan)
    with pytest.raises(
        PipelineError,
        match=r"document 'doc-0': .* gives a log-probability of nan for its token 4: its weights are "
        r"finite and float64 is no 16-bit dtype",
    ):
        score(other_model_dir, tiny_artifact, tmp_path)
    assert not (tmp_path / "scores.jsonl").exists()


def test_results_and_manifests_are_strict_json(tmp_path):
    from pipeline import files
    from pipeline.results import lines

    with pytest.raises(PipelineError, match=r"corpus\.grid\.1 \(inf\) is not a finite number"):
        lines.append(tmp_path / "s.jsonl", {"corpus": {"grid": [1.0, float("inf")]}})
    with pytest.raises(PipelineError, match=r"settings\.alpha \(nan\) is not a finite number"):
        files.write_json_atomic(tmp_path / "m.json", {"settings": {"alpha": float("nan")}})
    assert not (tmp_path / "s.jsonl").exists() and not (tmp_path / "m.json").exists()
