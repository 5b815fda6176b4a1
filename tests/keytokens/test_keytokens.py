"""Stage 1 end to end on a tiny model: artifact invariants, resume, and bad input."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from pipeline import files
from pipeline.artifact import reader as artifacts
from pipeline.artifact import schema
from pipeline.artifact.writer import ArtifactWriter
from pipeline.definition import merge_spans
from pipeline.errors import PipelineError
from pipeline.provenance import file_sha256, text_sha256
from tests.support import STAGE1_TEXTS, compose_keytokens, keytokens_overrides, run_keytokens

TEXTS = STAGE1_TEXTS


@pytest.fixture
def corpus(write_corpus):
    return write_corpus([{"id": f"doc-{i}", "text": t} for i, t in enumerate(TEXTS)])


@pytest.fixture
def run_stage1(tiny_model_dir, corpus, tmp_path):
    def run(*extra, corpus_path=None):
        cfg = compose_keytokens(
            keytokens_overrides(tiny_model_dir, corpus_path or corpus, tmp_path / "out", *extra)
        )
        manifest = run_keytokens(cfg)
        return tmp_path / "out" / "test", manifest

    return run


def test_artifact_invariants(run_stage1, tokenizer):
    root, manifest = run_stage1()
    art = artifacts.load_artifact(root)
    docs = art.documents.to_pylist()
    tokens = art.tokens.to_pylist()
    assert [d["doc_id"] for d in docs] == ["doc-0", "doc-1", "doc-2"]
    # document sha256 match the texts, and the texts are the corpus texts (or their prefixes)
    for d, source in zip(docs, TEXTS, strict=True):
        assert d["sha256"] == text_sha256(d["text"])
        assert d["source_sha256"] == text_sha256(source)
        assert source.startswith(d["text"])
        assert d["truncated"] == (d["text"] != source)
    # manifest hashes match the files
    for name, entry in manifest["files"].items():
        assert file_sha256(root / name) == entry["sha256"]
    s = manifest["settings"]
    by_doc = {d["doc_id"]: d for d in docs}
    for doc_id, d in by_doc.items():
        rows = [t for t in tokens if t["doc_id"] == doc_id]
        text = d["text"]
        assert len(rows) == d["n_tokens"] <= s["max_tokens"]
        # token spans lie inside the text and are the evaluator's own tokens of it
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        assert [r["token_id"] for r in rows] == enc["input_ids"]
        assert [(r["char_start"], r["char_end"]) for r in rows] == [tuple(o) for o in enc["offset_mapping"]]
        long = np.array([r["long_logprob"] for r in rows], dtype=float)
        short = np.array([r["short_logprob"] if r["short_logprob"] is not None else np.nan for r in rows])
        lsd = np.array([r["lsd"] if r["lsd"] is not None else np.nan for r in rows])
        weight = np.array([r["soft_weight"] if r["soft_weight"] is not None else np.nan for r in rows])
        key = np.array([r["is_key"] for r in rows])
        # BOS is prepended: seq position of token j is j + 1; no short context before position K
        assert np.isnan(short[: s["K"] - 1]).all() and not np.isnan(short[s["K"] - 1 :]).any()
        np.testing.assert_array_equal(np.isnan(lsd), np.isnan(short))
        ok = ~np.isnan(lsd)
        assert (lsd[ok] == long[ok] - short[ok]).all()
        assert (key == (ok & (np.nan_to_num(lsd, nan=-np.inf) > s["alpha"]) & (long > s["beta"]))).all()
        np.testing.assert_array_equal(weight[ok], np.minimum(np.exp(lsd[ok]), s["gamma"]))
        assert (long <= 0).all() and (short[ok] <= 0).all()
        # spans: merged key-token intervals, inside the text
        spans = [r for r in art.spans.to_pylist() if r["doc_id"] == doc_id]
        starts, ends, counts = merge_spans(
            np.array([r["char_start"] for r in rows])[key], np.array([r["char_end"] for r in rows])[key]
        )
        assert [(r["char_start"], r["char_end"], r["n_tokens"]) for r in spans] == list(
            zip(starts.tolist(), ends.tolist(), counts.tolist(), strict=True)
        )
        assert all(0 <= r["char_start"] < r["char_end"] <= len(text) for r in spans)
        assert d["n_key_tokens"] == key.sum() > 0
    assert manifest["settings"]["evaluator"]["kind"] == "local"
    assert manifest["settings"]["evaluator"]["weights_sha256"]
    assert manifest["schema_version"] == schema.SCHEMA_VERSION
    assert {"torch", "transformers", "pyarrow"} <= set(manifest["libraries"])


def test_rerun_is_a_no_op_and_resume_ends_identical(run_stage1):
    root, _ = run_stage1()
    before = {p.name: p.read_bytes() for p in root.glob("*.parquet")}
    run_stage1()  # complete with the same settings: nothing rewritten
    assert {p.name: p.read_bytes() for p in root.glob("*.parquet")} == before
    # Simulate a crash after the first document: its part exists, the rest does not.
    crashed = root.parent / "crashed"
    shutil.copytree(root, crashed)
    tables = {n: pq.read_table(root / f"{n}.parquet") for n in schema.TABLES}
    manifest = json.loads((root / "manifest.json").read_text())
    shutil.rmtree(root)
    writer = ArtifactWriter(root, manifest["settings"], manifest["fingerprint"])
    writer.start()
    first = {n: t.filter(t["doc_id"].to_numpy(zero_copy_only=False) == "doc-0") for n, t in tables.items()}
    writer.write_part(0, first["documents"].to_pylist()[0], first["tokens"], first["spans"])
    (writer.parts / ".tmp-halfwritten").mkdir()  # a crash mid-part leaves only a temporary directory
    _, resumed = run_stage1()
    assert resumed["run"]["resumed_documents"] == 1
    assert {p.name: p.read_bytes() for p in root.glob("*.parquet")} == before


def test_resume_with_other_settings_is_an_error(run_stage1, tiny_model_dir, corpus, tmp_path):
    root, _ = run_stage1()
    (root / "manifest.json").unlink()
    files.write_json_atomic(root / "run.json", {"fingerprint": "other", "settings": {"K": 99}})
    with pytest.raises(PipelineError, match=r"other settings.*K"):
        run_stage1()
    shutil.rmtree(root)
    run_stage1()
    with pytest.raises(PipelineError, match="other settings"):
        run_stage1("K=12")


def test_skipped_documents_are_recorded(run_stage1, write_corpus, capsys):
    path = write_corpus(
        [
            {"id": "ok", "text": TEXTS[0]},
            {"id": "empty", "text": ""},
            {"id": "blank", "text": " \n\t "},
            {"id": "short", "text": "Too short."},
        ],
        name="mixed.jsonl",
    )
    root, manifest = run_stage1(corpus_path=path)
    reasons = {s["doc_id"]: s["reason"] for s in manifest["skipped"]}
    assert set(reasons) == {"empty", "blank", "short"}
    assert "short context" in reasons["short"] and "empty" in reasons["empty"]
    assert "skipped     short" in capsys.readouterr().out
    assert artifacts.load_artifact(root).documents["doc_id"].to_pylist() == ["ok"]


def test_min_tokens_and_num_documents(run_stage1):
    _, manifest = run_stage1("min_tokens=100", "num_documents=1")
    assert [d["doc_id"] for d in manifest["documents"]] == ["doc-0"]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"id": "a", "text": "x " * 100}, {"id": "a", "text": "y " * 100}], "duplicate document id 'a'"),
        ([{"id": "a", "body": "x"}], "no 'text' column.*corpus.text_field"),
    ],
)
def test_bad_corpus(run_stage1, write_corpus, rows, message):
    with pytest.raises(PipelineError, match=message):
        run_stage1(corpus_path=write_corpus(rows, name="bad.jsonl"))


def test_unreadable_rows_are_skipped_naming_their_file_and_line(run_stage1, tmp_path, capsys):
    """A line that is not UTF-8, not JSON or not an object, and a row without its text: each skipped,
    named by its file and line in a warning and in the manifest's skipped documents; the other
    documents are scored, as without those rows (the same fingerprint)."""
    path = tmp_path / "rows.jsonl"
    good = [json.dumps({"id": f"doc-{i}", "text": t}).encode() for i, t in enumerate(TEXTS)]
    bad = [b'{"id": "b", "text": "caf\xe9"}', b"{not json", b"[1, 2]", b'{"id": "c", "text": null}']
    path.write_bytes(b"\n".join([good[0], *bad, *good[1:]]) + b"\n")
    _, manifest = run_stage1(corpus_path=path)
    skipped = {s["doc_id"]: s["reason"] for s in manifest["skipped"]}
    assert list(skipped) == ["rows.jsonl:2", "rows.jsonl:3", "rows.jsonl:4", "rows.jsonl:5"]
    assert (
        skipped["rows.jsonl:2"]
        == f"cannot be read: {path}, line 2: invalid UTF-8 at byte 24; fix the file's encoding"
    )
    assert "line 3: not valid JSON" in skipped["rows.jsonl:3"] and "JSON object" in skipped["rows.jsonl:4"]
    assert "line 5: 'text' is NoneType, not text" in skipped["rows.jsonl:5"]
    err = capsys.readouterr().err
    assert all(f"warning: skipped rows.jsonl:{n}: cannot be read: " in err for n in (2, 3, 4, 5))
    assert [d["doc_id"] for d in manifest["documents"]] == ["doc-0", "doc-1", "doc-2"]
    clean = run_stage1("name=clean")[1]
    assert clean["fingerprint"] == manifest["fingerprint"]


def test_document_longer_than_context(run_stage1, write_corpus):
    with pytest.raises(PipelineError, match="exceeds the evaluator's context of 512"):
        run_stage1("max_tokens=600")
    long_doc = write_corpus([{"id": "long", "text": TEXTS[2] * 8}], name="long.jsonl")
    with pytest.raises(
        PipelineError, match=r"'long' has .* more than the evaluator's context of 512.*max_tokens"
    ):
        run_stage1("max_tokens=null", corpus_path=long_doc)


def test_unknown_model(run_stage1):
    with pytest.raises(PipelineError, match="unknown model"):
        run_stage1("evaluator.spec=no-such-model")
    with pytest.raises(PipelineError, match="GGUF file not found"):
        run_stage1("evaluator.spec=/nowhere/model.gguf")
    with pytest.raises(PipelineError, match="model path not found"):
        run_stage1("evaluator.spec=./nowhere/checkpoint")
    with pytest.raises(PipelineError, match="hf download org/missing-model"):
        run_stage1("evaluator.spec=org/missing-model")


class NoOffsets:
    """A tokenizer without offset support (like the slow Phi-3 tokenizer the official package met)."""

    def __init__(self, fast):
        self.fast = fast
        self.name_or_path = "no-offsets"

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=False):
        if return_offsets_mapping:
            raise NotImplementedError("return_offset_mapping is not available")
        return self.fast(text, add_special_tokens=add_special_tokens)

    def decode(self, ids, **kwargs):
        return self.fast.decode(ids, **kwargs)


def test_offsets_fallback_by_decoding(tokenizer):
    from pipeline.text.tokenization import encode_with_offsets

    text = "Federal law provides powers.\r\nline 7: REGISTER_CONTENT is 4512, café."
    fast = encode_with_offsets(tokenizer, text)
    slow = encode_with_offsets(NoOffsets(tokenizer), text)
    assert slow.offsets_from == "decode" and fast.offsets_from == "tokenizer"
    np.testing.assert_array_equal(slow.ids, fast.ids)
    np.testing.assert_array_equal(slow.offsets, fast.offsets)
    with pytest.raises(PipelineError, match="do not add up"):
        encode_with_offsets(NoOffsets(tokenizer), "unseen emoji 🦊🎉 split into bytes")


def test_fingerprint_does_not_depend_on_file_locations(run_stage1, tiny_model_dir, corpus, tmp_path, capsys):
    _, manifest = run_stage1()
    moved_model = shutil.copytree(tiny_model_dir, tmp_path / "moved-model")
    moved_corpus = shutil.copy(corpus, tmp_path / "moved.jsonl")
    cfg = compose_keytokens(keytokens_overrides(moved_model, moved_corpus, tmp_path / "out"))
    assert run_keytokens(cfg)["fingerprint"] == manifest["fingerprint"]
    assert "nothing to do" in capsys.readouterr().out


def test_key_token_view(run_stage1, tmp_path):
    import html as html_lib
    import re

    from pipeline.reporting.keytoken_page import document_html

    root, _ = run_stage1()
    page = document_html(root, "doc-0")
    art = artifacts.load_artifact(root)
    text = art.texts()["doc-0"]
    assert page.count('class="key"') > 0 and "LSD" in page
    body = page.split('<div class="text">', 1)[1].rsplit("</div>", 1)[0]
    assert html_lib.unescape(re.sub(r"<[^>]+>", "", body)) == text  # every character shown once, in order
    views = root / "views"  # stage 1 wrote every document's page and the index, inside the artifact
    assert sorted(p.name for p in views.iterdir()) == ["doc-0.html", "doc-1.html", "doc-2.html", "index.html"]
    index = (views / "index.html").read_text()
    assert all(f'<a href="doc-{i}.html">doc-{i}</a>' in index for i in range(3))
    assert f"<td>{art.documents['n_key_tokens'][0].as_py()}</td>" in index
    with pytest.raises(PipelineError, match="no document 'nope'"):
        document_html(root, "nope")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("K=0", "setting K=0: Input should be greater than 0"),
        ("d=-2", "setting d=-2: Input should be greater than 0"),
        ("alpha=nan", "setting alpha=nan: Input should be a finite number"),
        ("beta=-inf", "setting beta=-inf: Input should be a finite number"),
        ("gamma=0", "setting gamma=0: Input should be greater than 0"),
        ("num_documents=0", "setting num_documents=0: Input should be greater than 0"),
        ("max_tokens=8", "max_tokens=8 is below K=16: no token would have a short context"),
        ("name=../elsewhere", "setting name='../elsewhere': String should match pattern"),
    ],
)
def test_settings_are_checked_before_anything_loads(corpus, tmp_path, override, message):
    key = override.split("=")[0]
    base = [
        o
        for o in keytokens_overrides(tmp_path / "no-model", corpus, tmp_path / "out")
        if o.split("=")[0] != key
    ]
    with pytest.raises(PipelineError, match=re.escape(message)):
        run_keytokens(compose_keytokens([*base, override]))
    assert not (tmp_path / "out").exists()


def test_a_failed_run_leaves_nothing_a_rerun_trips_over(run_stage1, tmp_path, monkeypatch):
    def out_of_memory(*args, **kwargs):
        raise RuntimeError("out of memory")

    with monkeypatch.context() as patch:
        patch.setattr("pipeline.keytokens.step.keytoken_tables", out_of_memory)
        with pytest.raises(RuntimeError, match="out of memory"):
            run_stage1()
    assert not (tmp_path / "out" / "test").exists()
    _, manifest = run_stage1("K=12")  # other settings, same artifact name: no "other settings" error
    assert manifest["settings"]["K"] == 12


def test_document_ids_never_place_pages_outside_the_views(run_stage1, write_corpus, tmp_path):
    from pipeline.reporting.keytoken_page import page_name

    ids = ["../../escape", "a/b", "a_b", "index", "ü é", "x" * 300]
    path = write_corpus([{"id": i, "text": TEXTS[2]} for i in ids], name="hostile.jsonl")
    root, _ = run_stage1(corpus_path=path)
    pages = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.html"))
    expected = [*(page_name(i) for i in ids), "index.html"]
    assert pages == sorted(f"out/test/views/{name}" for name in expected) and len(set(pages)) == 7
    assert page_name("a_b") == "a_b.html" and page_name("index") != "index.html"
    assert page_name("../../escape").startswith("escape-") and len(page_name("x" * 300)) < 100
    index = (root / "views" / "index.html").read_text()
    assert index.count("<a href=") == 6 and ">../../escape</a>" in index


def test_a_float16_overflow_is_an_error_naming_the_document_and_the_token(
    tiny_model_dir, tokenizer, write_corpus, tmp_path
):
    """One token's embedding is beyond float16's range (65504): in float32 the model runs, in float16
    its hidden states turn NaN (on the CPU every position: masked attention weights of 0 times NaN
    values), and stage 1 stops at the first NaN log-prob with one line naming the document and the
    token; nothing is written."""
    from transformers import AutoModelForCausalLM

    ids = tokenizer(TEXTS[0], add_special_tokens=False)["input_ids"]
    probe = {k * 7919 % len(tokenizer) for k in range(12)}  # the self-check's tokens: left alone
    token = next(i for i in ids[8:] if i not in probe and i not in tokenizer(TEXTS[2])["input_ids"])
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        model.get_input_embeddings().weight[token] *= 1e6
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    corpus = write_corpus([{"id": "ok", "text": TEXTS[2]}, {"id": "overflows", "text": TEXTS[0]}])
    overrides = keytokens_overrides(tmp_path / "model", corpus, tmp_path / "out", "max_tokens=400")
    run_keytokens(compose_keytokens([*overrides, "dtype=float32", "name=fp32"]))  # finite in float32
    with pytest.raises(PipelineError) as info:
        run_keytokens(compose_keytokens([*overrides, "dtype=float16"]))
    assert re.fullmatch(
        r"document 'overflows': the evaluator's long-context log-prob of token \d+ \(characters \d+-\d+\) "
        r"is nan: overflow in a 16-bit dtype\? .*; the run stops before writing this document",
        str(info.value),
    )
    assert not (tmp_path / "out" / "test" / "manifest.json").exists()


@pytest.mark.parametrize("bos", [True, False])
@pytest.mark.parametrize("which", ["long", "short"])
def test_a_non_finite_logprob_names_its_token(tokenizer, which, bos):
    """A model whose final hidden state is NaN at position 20 of the long pass (or of each short
    window): the error names the first token whose log-prob reads it, in the text's tokens."""
    from pipeline.definition import KeyTokenDefinition
    from pipeline.keytokens.selection import Prepared
    from pipeline.keytokens.tables import keytoken_tables
    from pipeline.models.logprobs import TargetScorer
    from pipeline.text.corpus import Document
    from tests.support import build_model

    enc = tokenizer(TEXTS[0], add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = np.array(enc["input_ids"]), np.array(enc["offset_mapping"])
    item = Prepared(0, Document("d", TEXTS[0]), TEXTS[0], ids, offsets, "tokenizer", False)
    n_seq, K, d, prefix = len(ids) + bos, 16, 8, int(bos)
    model = build_model("llama", len(tokenizer))

    def nan_at_20(module, args, output):
        if (output.shape[1] == n_seq) == (which == "long") and output.shape[1] > 20:
            output[:, 20] = np.nan
        return output

    model.model.norm.register_forward_hook(nan_at_20)
    rule = KeyTokenDefinition(K=K, d=d, alpha=0.5, beta=-30.0, short_window_bos=bos)
    # long: position 20 predicts sequence token 21; short: in the first window (start d, its BOS
    # too), position 20 predicts sequence token d + 21 - prefix
    token = (21 if which == "long" else d + 21 - prefix) - prefix
    with pytest.raises(PipelineError) as info:
        keytoken_tables(TargetScorer(model, head_chunk=16), item, rule, bos_id=0 if bos else None)
    start, end = offsets[token]
    where = f"token {token} (characters {start}-{end}) is nan"
    assert str(info.value).startswith(f"document 'd': the evaluator's {which}-context log-prob of {where}")


def test_no_key_token_is_said_and_explained(tiny_model_dir, other_model_dir, write_corpus, tmp_path, capsys):
    """beta=5: LCL is a log-probability (at most 0), so no token can be key; the run goes on (the soft
    weights and the grid still hold) and both summaries say why LongPPL is n/a."""
    from pipeline.commands.score import run as run_score
    from tests.support import compose_config, compose_keytokens, keytokens_overrides, run_keytokens

    corpus = write_corpus([{"id": f"d{i}", "text": t} for i, t in enumerate(STAGE1_TEXTS)])
    run_keytokens(compose_keytokens(keytokens_overrides(tiny_model_dir, corpus, tmp_path, "beta=5")))
    reason = "beta=5 admits none, since LCL is a log-probability, at most 0 (the paper's beta is -2)"
    assert f"note        no key token: {reason}" in capsys.readouterr().out
    row = run_score(compose_config("score", [
        "model=local", f"model.spec={other_model_dir}", f"artifact={tmp_path / 'test'}",
        f"results={tmp_path / 's.jsonl'}", "device=cpu", "progress=false",
    ]))  # fmt: skip
    assert row["corpus"]["n_key_tokens"] == 0 and row["corpus"]["longppl"] is None
    assert f"no key token: the artifact's {reason}" in capsys.readouterr().out
