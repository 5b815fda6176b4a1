"""The Python API: score / find_key_tokens for models in memory, the drop-in compute_longppl, the
TrainerCallback, and the example of docs/api.md (integration: the embedded models)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import pipeline
from pipeline import api
from pipeline.api.dropin import compute_longppl
from pipeline.artifact.reader import load_artifact
from pipeline.errors import PipelineError
from pipeline.models.loading import load_model
from tests.support import ROOT, STAGE1_TEXTS, compose_config, default_artifact
from tests.support import score as score_stage

TEXT = (
    "The committee reported the bill. " * 9 + "line 7: REGISTER_CONTENT is 4512. " * 4 + "Emoji 😀 café. " * 3
)


def test_score_in_memory_gives_the_numbers_of_the_score_stage(other_model_dir, tiny_artifact, tmp_path):
    stage = score_stage(other_model_dir, tiny_artifact, tmp_path, "context_limit=40")
    lm = load_model(str(other_model_dir), dtype="float64", device="cpu")
    lm.model.train()  # the API scores in eval mode and restores the mode
    result = api.score(
        lm.model,
        lm.tokenizer,
        str(tiny_artifact),
        head_chunk=16,
        context_limit=40,
        results_file=tmp_path / "r.jsonl",
    )
    assert lm.model.training
    assert result.corpus == stage["corpus"] and result.documents == stage["documents"]
    assert (result.ppl, result.longppl, result.longppl_soft) == tuple(
        stage["corpus"][m] for m in ("ppl", "longppl", "longppl_soft")
    )
    line = json.loads((tmp_path / "r.jsonl").read_text())
    assert line["corpus"] == stage["corpus"] and line["model"]["kind"] == "memory"
    two = api.score(
        lm.model, lm.tokenizer, load_artifact(tiny_artifact), head_chunk=16, context_limit=40, documents=2
    )
    assert two.documents == stage["documents"][:2]
    with pytest.raises(PipelineError, match="no document"):
        api.score(lm.model, lm.tokenizer, tiny_artifact, documents=["nope"])
    assert pipeline.score_model is api.score and pipeline.compute_longppl is compute_longppl


def test_find_key_tokens_returns_the_keytokens_stage_tables(
    tiny_model_dir, tiny_artifact, other_model_dir, tmp_path
):
    lm = load_model(str(tiny_model_dir), dtype="float64", device="cpu")
    texts = {f"doc-{i}": t for i, t in enumerate(STAGE1_TEXTS)}
    found = api.find_key_tokens(
        texts, lm.model, lm.tokenizer, K=16, d=8, alpha=0.5, beta=-30, max_tokens=150, head_chunk=16
    )
    stage = load_artifact(tiny_artifact)
    for name in ("documents", "tokens", "spans"):
        assert getattr(found, name).equals(getattr(stage, name)), name
    for key in ("K", "d", "alpha", "beta", "gamma", "max_tokens", "add_bos", "short_window_bos", "documents"):
        assert found.settings[key] == stage.settings[key], key
    saved = api.save_key_tokens(found, tmp_path / "saved")
    assert (
        score_stage(other_model_dir, saved, tmp_path)["corpus"]
        == score_stage(other_model_dir, tiny_artifact, tmp_path)["corpus"]
    )
    short = api.find_key_tokens(["too short", *STAGE1_TEXTS[:1]], lm.model, lm.tokenizer, K=16, d=8)
    assert short.documents["doc_id"].to_pylist() == ["doc-00001"]
    assert short.manifest["skipped"][0]["doc_id"] == "doc-00000"


def official_window(tokenizer, text: str, K: int) -> int:
    """A step d for which the official find_key_token does not fail (it cannot take a 1-token window)."""
    n = len(tokenizer(text)["input_ids"])
    return next(w for w in (8, 7, 6, 5) if (n - K) % w != 1)


@pytest.mark.parametrize(("alpha", "beta"), [(0.5, -30.0), (2.0, -2.0)])
def test_compute_longppl_agrees_with_the_official_package(
    tiny_model_dir, other_model_dir, tmp_path, alpha, beta
):
    from longppl.longppl import compute_longppl as official

    evaluator = load_model(str(tiny_model_dir), dtype="float64", device="cpu")
    model = load_model(str(other_model_dir), dtype="float64", device="cpu")
    d = official_window(evaluator.tokenizer, TEXT, 16)
    args = (TEXT, model.model, evaluator.model, model.tokenizer, evaluator.tokenizer)
    ours = compute_longppl(
        *args, save_path=str(tmp_path / "ours.txt"), trunc_len=16, sliding_window=d, alpha=alpha, beta=beta
    )
    theirs = official(
        *args, save_path=str(tmp_path / "theirs.txt"), trunc_len=16, sliding_window=d, alpha=alpha, beta=beta
    )
    assert set(ours) == set(theirs) == {"longppl", "n_key_token", "ppl", "n_token"}
    assert ours["n_token"] == theirs["n_token"] and ours["n_key_token"] == theirs["n_key_token"]
    assert ours["ppl"] == pytest.approx(float(theirs["ppl"]), rel=1e-4)
    if theirs["longppl"] is None:
        assert ours["longppl"] is None
    else:
        assert ours["longppl"] == pytest.approx(float(theirs["longppl"]), rel=1e-4)
    # offline mode both ways: each reads the spans the other wrote
    for path in ("ours.txt", "theirs.txt"):
        mine = compute_longppl(TEXT, model.model, None, model.tokenizer, save_path=str(tmp_path / path))
        assert mine["longppl"] == ours["longppl"] or mine["longppl"] == pytest.approx(
            ours["longppl"], rel=1e-12
        )
    if alpha < 1:
        assert ours["n_key_token"] > 5


def test_compute_longppl_inputs(tiny_model_dir, tmp_path):
    lm = load_model(str(tiny_model_dir), dtype="float64", device="cpu")
    with pytest.raises(PipelineError, match="needs an evaluator_model, or save_path"):
        compute_longppl(TEXT, lm.model, None, lm.tokenizer)
    (tmp_path / "bad.txt").write_text("[1, 2];__import__('os')")
    with pytest.raises(PipelineError, match="not '\\[start, end\\]'"):
        compute_longppl(TEXT, lm.model, None, lm.tokenizer, save_path=str(tmp_path / "bad.txt"))
    out = compute_longppl("short text", lm.model, lm.model, lm.tokenizer, lm.tokenizer, trunc_len=16)
    n_token = len(lm.tokenizer("short text", add_special_tokens=False)["input_ids"])
    assert out["longppl"] is None and out["n_key_token"] is None and out["n_token"] == n_token


def test_trainer_callback_reports_longppl_at_each_evaluation(tiny_model_dir, tiny_artifact, tmp_path):
    import torch
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        Trainer,
        TrainingArguments,
        default_data_collator,
    )

    from pipeline.api.callback import LongPPLCallback

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids = tokenizer(STAGE1_TEXTS[2], add_special_tokens=False)["input_ids"][:32]
    data = [{"input_ids": ids, "labels": ids}] * 4
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=2,
        per_device_eval_batch_size=2,
        max_steps=4,
        eval_strategy="steps",
        eval_steps=2,
        logging_steps=2,
        learning_rate=1e-2,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
    )
    callback = LongPPLCallback(tiny_artifact, documents=2, head_chunk=16)
    trainer = Trainer(
        model,
        args,
        data_collator=default_data_collator,  # equal lengths: no padding
        train_dataset=data,
        eval_dataset=data,
        processing_class=tokenizer,
        callbacks=[callback],
    )
    trainer.train()
    assert [h["step"] for h in callback.history] == [2, 4]
    assert callback.history[0]["eval_longppl"] != callback.history[1]["eval_longppl"]  # the model learned
    logged = [h for h in trainer.state.log_history if "eval_longppl" in h]
    assert [h["step"] for h in logged] == [2, 4]
    metrics = trainer.evaluate()
    expected = api.score(model, tokenizer, tiny_artifact, documents=2, head_chunk=16)
    assert metrics["eval_longppl"] == expected.longppl and metrics["eval_ppl"] == expected.ppl
    assert metrics["eval_longppl_soft"] == expected.longppl_soft


# ----------------------------------------------------------------------------------------------
# Integration: the embedded models


@pytest.mark.integration
def test_score_on_smollm2_gives_exactly_the_numbers_of_make_score(tmp_path):
    """The default artifact's first two documents (as an artifact of their own, so that `make score`
    takes a minute): the score stage's run and ``score`` on the default artifact with documents=2."""
    from pipeline.artifact.schema import KeyTokenArtifact, new_manifest, settings_fingerprint
    from pipeline.artifact.writer import write_artifact
    from pipeline.commands.score import run

    full = load_artifact(default_artifact())
    n_tokens = sum(full.documents["n_tokens"].to_pylist()[:2])
    n_spans = sum(full.documents["n_spans"].to_pylist()[:2])
    settings = {**full.settings, "documents": full.settings["documents"][:2]}
    extra = {"documents": full.manifest["documents"][:2]}
    manifest = new_manifest(full.kind, settings_fingerprint(settings), settings, extra)
    tables = (full.documents.slice(0, 2), full.tokens.slice(0, n_tokens), full.spans.slice(0, n_spans))
    write_artifact(tmp_path / "two", KeyTokenArtifact(tmp_path / "two", manifest, *tables))
    cfg = compose_config(
        "score", [f"artifact={tmp_path / 'two'}", f"results={tmp_path / 's.jsonl'}", "progress=false"]
    )
    stage = run(cfg)
    lm = load_model("smollm2-135m", dtype=str(cfg.dtype), device=str(cfg.device))
    result = api.score(lm.model, lm.tokenizer, full.root, documents=2)
    assert result.corpus == stage["corpus"] and result.documents == stage["documents"]
    assert result.longppl is not None and result.longppl_soft is not None


@pytest.mark.integration
def test_compute_longppl_agrees_with_the_official_package_on_a_real_document():
    """Gemma 3 270M (whose tokenizer adds BOS) as evaluator, SmolLM2 scored, on the first 1536 Gemma
    tokens of a shipped GovReport document; trunc_len=512, sliding_window=512."""
    from longppl.longppl import compute_longppl as official

    from pipeline.text.tokenization import encode_with_offsets

    evaluator = load_model("gemma3-270m", dtype="float32", device="cpu", attn_implementation="sdpa")
    model = load_model("smollm2-135m", dtype="float32", device="cpu", attn_implementation="sdpa")
    text = json.loads((ROOT / "data/govreport-sample.jsonl").open(encoding="utf-8").readline())["text"]
    text = text[: int(encode_with_offsets(evaluator.tokenizer, text).offsets[1535, 0])]
    args = (text, model.model, evaluator.model, model.tokenizer, evaluator.tokenizer)
    ours = compute_longppl(*args, trunc_len=512, sliding_window=512)
    theirs = official(*args, trunc_len=512, sliding_window=512)
    assert ours["n_token"] == theirs["n_token"] and ours["n_key_token"] == theirs["n_key_token"] > 0
    assert ours["ppl"] == pytest.approx(float(theirs["ppl"]), rel=1e-4)
    assert ours["longppl"] == pytest.approx(float(theirs["longppl"]), rel=1e-4)


@pytest.mark.integration
def test_the_documented_example_runs():
    """The Python API page's example (docs/api.md, its first Python block), executed as written (from
    the repository root)."""
    import os

    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", page, re.S)[1]
    namespace: dict = {}
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        exec(compile(code, "docs/api.md", "exec"), namespace)  # the project's own documentation
    finally:
        os.chdir(cwd)
    result, out = namespace["result"], namespace["out"]
    assert result.longppl is not None and np.isfinite(result.ppl) and out["n_key_token"] > 0
