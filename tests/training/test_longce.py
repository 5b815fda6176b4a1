"""LongCE on tiny random-weight models in float64: the weights against the reference's
semantics, the gradient, the artifact weights against stage 2, bad input, and the training entry."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.artifact import reader as artifacts
from pipeline.definition import KeyTokenDefinition
from pipeline.errors import PipelineError
from pipeline.models.loading import LoadedModel, ModelSource, load_model
from pipeline.models.logprobs import TargetScorer
from pipeline.score.documents import score_document
from pipeline.settings import Compute, ScoreSettings, parse
from pipeline.text.tokenization import encode_with_offsets
from pipeline.training.longce import ArtifactWeights, LongCE, LongCESettings
from tests.support import ROOT, build_model, compose_config

VOCAB = 97


def reference_weights(model, ids: torch.Tensor, K: int, d: int, gamma: float, bos: int | None = None):
    """The reference's loss_weight semantics, written out plainly: full-vocabulary logits, every
    window s = 0, d, 2d, ... < n - K run as its own forward pass (the last one partial), weight
    exp(short NLL - long NLL) for the targets it scores, 1 elsewhere, all clamped at gamma; returns
    the weights of targets ids[1:]. ``bos``: prefix every window but the first with it."""
    n = len(ids)
    with torch.no_grad():
        long = torch.log_softmax(model(input_ids=ids[None]).logits[0].double(), -1)
        long_nll = -long[:-1].gather(1, ids[1:, None]).squeeze(1)  # target j + 1
        ratio = torch.ones(n, dtype=torch.float64)
        for s in range(0, n - K, d):
            end = min(s + K + d, n)
            prefix = [] if bos is None or s == 0 else [bos]
            window = torch.cat([torch.tensor(prefix, dtype=ids.dtype), ids[s:end]])
            logp = torch.log_softmax(model(input_ids=window[None]).logits[0].double(), -1)
            for t in range(s + K, end):  # token t, predicted at window position t - s - 1 (+ prefix)
                short_nll = -logp[t - s - 1 + len(prefix), ids[t]]
                ratio[t] = torch.exp(short_nll - long_nll[t - 1])
    return torch.clamp(ratio[1:], max=gamma)


@pytest.fixture(scope="module")
def tiny():
    return build_model("llama", VOCAB, max_positions=256)


def sequence(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(2, VOCAB, (n,), generator=torch.Generator().manual_seed(seed))


def longce(source: str = "self", window_bos_id: int | None = None, **values) -> LongCE:
    """LongCE with these definition (K, d, gamma) and compute (head_chunk) settings."""
    definition = parse(KeyTokenDefinition, values)
    compute = parse(Compute, values)
    return LongCE(LongCESettings(source, definition, compute, window_bos_id))


@pytest.mark.parametrize(
    ("n", "K", "d", "gamma"),
    [
        (50, 16, 8, 5.0),  # partial last window (tokens 48, 49)
        (64, 16, 8, 5.0),  # windows that end exactly at the sequence's end
        (37, 12, 10, 2.0),  # a low cap: many weights clamped
        (20, 16, 8, 5.0),  # K < n <= K + d: only the window at 0 (the full context)
        (12, 16, 8, 5.0),  # shorter than K: no short context at all
        (50, 16, 8, 0.5),  # gamma < 1: every weight capped, the ones too, as in the reference
    ],
)
def test_self_weights_equal_the_reference(tiny, n, K, d, gamma):
    ids = sequence(n, seed=n)
    loss = longce("self", K=K, d=d, gamma=gamma, head_chunk=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = loss(tiny, ids[None])
    ref = reference_weights(tiny, ids, K, d, gamma)
    assert out.weights.dtype == torch.float32 and out.weights.shape == (1, n - 1)
    # compare the float64 weights the loss multiplied with (out.weights is their float32 copy)
    np.testing.assert_allclose(_float64_weights(loss, tiny, ids), ref.numpy(), rtol=0, atol=1e-9)
    if n > K + d:
        assert (ref[K:] != 1).any() and (ref <= gamma).all()


def _float64_weights(loss: LongCE, model, ids: torch.Tensor) -> np.ndarray:
    from pipeline.training.longce import token_nll

    with torch.no_grad():
        nll = token_nll(model, ids[None], ids[None, 1:])
    mask = torch.ones_like(nll, dtype=torch.bool)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return loss.self_weights(model, ids[None], nll, mask)[0].numpy()


def test_self_weights_with_a_bos_before_every_short_window(tiny):
    ids = sequence(61, seed=3)
    loss = longce("self", K=16, d=8, window_bos_id=0)
    ref = reference_weights(tiny, ids, 16, 8, 5.0, bos=0)
    np.testing.assert_allclose(_float64_weights(loss, tiny, ids), ref.numpy(), rtol=0, atol=1e-9)
    plain = reference_weights(tiny, ids, 16, 8, 5.0)
    assert not torch.allclose(ref, plain)  # the BOS changes the short contexts


def test_padded_batch_rows_equal_their_own_weights(tiny):
    """Right padding, labels -100: each row's weights are those of the row alone."""
    a, b = sequence(50, seed=1), sequence(41, seed=2)
    ids = torch.stack([a, torch.cat([b, torch.ones(9, dtype=torch.long)])])
    labels = ids.clone()
    labels[1, 41:] = -100
    loss = longce("self", K=16, d=8)
    out = loss(tiny, ids, labels=labels)
    assert out.n_tokens == 49 + 40 and out.mask[1, 40:].sum() == 0
    for row, seq in ((0, a), (1, b)):
        ref = reference_weights(tiny, seq, 16, 8, 5.0).float()
        torch.testing.assert_close(out.weights[row, : len(seq) - 1], ref, rtol=0, atol=1e-6)


def test_gradient_is_that_of_ce_weighted_by_constants(tiny):
    model = build_model("llama", VOCAB, max_positions=256, seed=4)
    ids = sequence(58, seed=5)[None]
    out = longce("self", K=16, d=8, gamma=3.0)(model, ids)
    out.loss.backward()
    ours = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    w = torch.from_numpy(_float64_weights(longce(K=16, d=8, gamma=3.0), model, ids[0]))
    assert (w > 1).any() and (w == 3.0).any() and (w < 1).any()
    logits = model(input_ids=ids).logits[0, :-1].double()
    nll = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none")
    ((w * nll).sum() / len(nll)).backward()
    for g, p in zip(ours, model.parameters(), strict=True):
        torch.testing.assert_close(g, p.grad, rtol=1e-9, atol=1e-12)
    model.zero_grad()
    plain = model(input_ids=ids, labels=ids).loss
    plain.backward()
    assert any(not torch.allclose(g, p.grad) for g, p in zip(ours, model.parameters(), strict=True))


def test_ce_source_is_the_models_own_loss(tiny):
    ids = sequence(40, seed=6)[None]
    out = longce("ce")(tiny, ids)
    own = tiny(input_ids=ids, labels=ids).loss  # transformers computes it in float32
    torch.testing.assert_close(out.loss.float(), own, rtol=1e-6, atol=0)
    logits = tiny(input_ids=ids).logits[0, :-1]
    direct = torch.nn.functional.cross_entropy(logits, ids[0, 1:])
    torch.testing.assert_close(out.loss, direct, rtol=1e-12, atol=0)
    assert (out.weights == 1).all()


# ----------------------------------------------------------------------------------------------
# Bad input, modes


@pytest.mark.parametrize("gamma", [0.0, -1.0])
def test_gamma_must_be_positive(gamma):
    with pytest.raises(PipelineError, match=f"setting gamma={gamma}: Input should be greater than 0"):
        longce(gamma=gamma)


def test_unknown_source_and_bad_K():
    with pytest.raises(PipelineError, match="setting source='teacher': Input should be 'self', 'artifact'"):
        parse(LongCESettings, {"source": "teacher"})
    with pytest.raises(PipelineError, match="setting K=0: Input should be greater than 0"):
        longce(K=0)


def test_sequences_without_a_shorter_context_give_weight_one_said_once(tiny):
    loss = longce("self", K=64, d=16)
    with pytest.warns(UserWarning, match="said once") as record:
        out = loss(tiny, sequence(30)[None])
        loss(tiny, sequence(70)[None])  # 70 <= K + d: the same, not said again
    assert len(record) == 1 and "K + d = 80" in str(record[0].message)
    assert (out.weights == 1).all()
    plain = longce("ce")(tiny, sequence(30)[None]).loss
    torch.testing.assert_close(out.loss, plain, rtol=1e-12, atol=0)


def test_artifact_source_needs_weights_of_the_batch_shape(tiny):
    loss = longce("artifact")
    with pytest.raises(PipelineError, match=r"needs per-target weights of shape \(1, 9\)"):
        loss(tiny, sequence(10)[None])
    w = torch.linspace(0.5, 5.0, 9)[None]
    out = loss(tiny, sequence(10)[None], weights=w)
    torch.testing.assert_close(out.weights, w.float())


def test_weights_use_the_models_mode():
    """Train mode: the short passes run with dropout, as the long pass with gradient does (the
    reference); eval mode: deterministic weights, equal to the reference's."""
    model = build_model("llama", VOCAB, max_positions=256, seed=7)
    model.config.attention_dropout = 0.5
    for layer in model.model.layers:
        layer.self_attn.attention_dropout = 0.5
    ids = sequence(50, seed=8)
    loss = longce("self", K=16, d=8)
    model.eval()
    first, second = _float64_weights(loss, model, ids), _float64_weights(loss, model, ids)
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(first, reference_weights(model, ids, 16, 8, 5.0).numpy(), atol=1e-9)
    model.train()
    torch.manual_seed(0)
    noisy = _float64_weights(loss, model, ids)
    assert model.training  # left as it was
    assert not np.allclose(noisy, first)


# ----------------------------------------------------------------------------------------------
# Weights from an artifact: equal to stage 2's soft weights of the same text


def check_artifact_weights_equal_stage2(lm: LoadedModel, art, doc_ids: list[str] | None = None) -> int:
    """For each artifact document used as a training text: the training sequence's weights are
    the soft weights stage 2 gives the same tokens. Stage 2 reports Σ w and Σ w·NLL over its
    weighted tokens; both must come out of the training weights and the NLL of a direct forward."""
    from pipeline.text.corpus import Document
    from pipeline.training.sequences import build_sequences

    weights = ArtifactWeights(art)
    scorer = TargetScorer(lm.model, head_chunk=512)
    kept = [a for a in artifacts.iter_documents(art) if doc_ids is None or a.doc_id in doc_ids]
    docs = [Document(a.doc_id, a.text) for a in kept]
    sequences, _ = build_sequences(docs, lm.tokenizer, max_length=10**6, weights=weights)
    checked = 0
    for doc, seq in zip(kept, sequences, strict=True):
        stage2 = score_document(lm, scorer, doc, ScoreSettings())
        offsets = encode_with_offsets(lm.tokenizer, doc.text).offsets
        has = ~np.isnan(weights.token_weights(doc.doc_id, doc.text, offsets))
        ids = torch.tensor([seq.input_ids])
        with torch.no_grad():
            logits = lm.model(input_ids=ids).logits[0, :-1].double()
        nll = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none").numpy()
        w = np.asarray(seq.weights)
        assert len(w) == len(nll) == len(offsets) and seq.n_weighted == has.sum() > 0
        assert (w[~has] == 1).all()
        assert np.sum(w[has]) == pytest.approx(stage2.soft.n, rel=1e-12)
        assert np.sum(w[has] * nll[has]) == pytest.approx(stage2.soft.nll, rel=1e-6)
        checked += int(has.sum())
    return checked


def test_artifact_weights_equal_stage2_soft_weights(other_model_dir, tiny_artifact):
    lm = load_model(str(other_model_dir), dtype="float64", device="cpu")
    assert check_artifact_weights_equal_stage2(lm, artifacts.load_artifact(tiny_artifact)) > 50


def test_artifact_weights_of_the_full_text_of_a_truncated_document(other_model_dir, tiny_artifact):
    from pipeline.text.corpus import Document
    from pipeline.training.sequences import build_sequences
    from tests.support import STAGE1_TEXTS

    art = artifacts.load_artifact(tiny_artifact)
    assert all(art.documents["truncated"].to_pylist())  # stage 1 scored a prefix of each
    tokenizer = load_model(str(other_model_dir), dtype="float64", device="cpu").tokenizer
    docs = [Document(f"doc-{i}", t) for i, t in enumerate(STAGE1_TEXTS)]
    sequences, _ = build_sequences(docs, tokenizer, max_length=10**6, weights=ArtifactWeights(art))
    for doc, seq, n_chars in zip(docs, sequences, art.documents["n_chars"].to_pylist(), strict=True):
        offsets = encode_with_offsets(tokenizer, doc.text).offsets
        beyond = offsets[:, 0] >= n_chars  # tokens after the scored prefix: no weight
        assert beyond.any() and (np.asarray(seq.weights)[beyond] == 1).all()
        assert 0 < seq.n_weighted < len(seq.weights)


def test_artifact_texts_that_do_not_match_are_an_error_naming_the_document(tiny_artifact):
    weights = ArtifactWeights(artifacts.load_artifact(tiny_artifact))
    doc = weights.documents["doc-1"]
    changed = doc.text[:40] + "X" + doc.text[41:]
    offsets = np.array([[0, len(changed)]])
    with pytest.raises(PipelineError, match=r"training document 'doc-1' does not match .*character 40"):
        weights.token_weights("doc-1", changed, offsets)
    with pytest.raises(PipelineError, match=r"training document 'doc-9' is not in the key-token artifact"):
        weights.token_weights("doc-9", doc.text, offsets)
    longer = doc.text + " and more"  # a longer text whose sha256 is not the recorded source's
    with pytest.raises(PipelineError, match="'doc-1' does not match"):
        weights.token_weights("doc-1", longer, offsets)


@pytest.mark.integration
def test_embedded_artifact_weights_equal_stage2_on_smollm2_tokens():
    """The embedded default artifact (Gemma 3 270M evaluator) on SmolLM2-135M's tokenizer; a tiny
    random model with SmolLM2's vocabulary gives the NLL (the weights do not depend on it)."""
    default = ROOT / compose_config("score", []).artifact
    root = Path(os.environ.get("LONGPPL_TEST_ARTIFACT", default))
    if not (root / "manifest.json").exists():
        pytest.skip(f"no default artifact at {root}: run `make keytokens` (or set LONGPPL_TEST_ARTIFACT)")
    smol = load_model("smollm2-135m", dtype="float32", device="cpu")
    model = build_model("llama", len(smol.tokenizer), max_positions=8192)
    lm = LoadedModel(
        model, smol.tokenizer, ModelSource("tiny", "local", "-"), torch.float64, torch.device("cpu")
    )
    art = artifacts.load_artifact(root)
    assert check_artifact_weights_equal_stage2(lm, art, ["govreport-00", "govreport-05"]) > 1000


# ----------------------------------------------------------------------------------------------
# The training entry


def finetune_cfg(model_dir, corpus, out, *extra):
    return compose_config(
        "finetune",
        [
            "model=local",
            f"model.spec={model_dir}",
            "corpus=local",
            f"corpus.path={corpus}",
            f"output_dir={out}",
            "K=16",
            "d=8",
            "max_length=80",
            "device=cpu",
            "training.max_steps=3",
            "training.warmup_steps=1",
            "training.save_steps=2",
            "training.disable_tqdm=true",
            *extra,
        ],
    )


@pytest.fixture
def stage1_corpus(tmp_path):
    from tests.support import STAGE1_TEXTS

    path = tmp_path / "corpus.jsonl"
    path.write_text(
        "".join(json.dumps({"id": f"doc-{i}", "text": t}) + "\n" for i, t in enumerate(STAGE1_TEXTS))
    )
    return path


@pytest.mark.parametrize("source", ["self", "ce", "artifact"])
def test_finetune_entry_runs_end_to_end(source, other_model_dir, tiny_artifact, stage1_corpus, tmp_path):
    from pipeline.commands.finetune import run as finetune_run
    from pipeline.training import trainer as finetune

    extra = [f"source={source}", f"artifact={tiny_artifact}", "name=run"]
    record = finetune_run(finetune_cfg(other_model_dir, stage1_corpus, tmp_path, *extra))
    run_dir = tmp_path / "run"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3] and record["steps"] == 3
    assert all(r["ce"] > 0 and r["tokens"] == 79 for r in steps)
    if source == "ce":
        assert all(r["loss"] == pytest.approx(r["ce"], rel=1e-5) and r["weight_mean"] == 1 for r in steps)
    else:
        assert all(r["weight_max"] > 1 for r in steps)
    saved = json.loads((run_dir / "final" / finetune.PROVENANCE).read_text())
    assert saved["status"] == "finished" and saved["loss"]["source"] == source
    assert saved["model"]["weights_sha256"] and saved["corpus"]["truncated"] == 3
    if source == "artifact":
        genuine = artifacts.load_artifact(tiny_artifact)
        assert saved["artifact"]["fingerprint"] == genuine.manifest["fingerprint"]
        assert saved["artifact"]["contents"] == genuine.contents
    assert (run_dir / "checkpoint-2").is_dir() and (run_dir / "final" / "config.json").is_file()
    reloaded = load_model(str(run_dir / "final"), dtype="float64", device="cpu")
    assert reloaded.tokenizer.bos_token_id == 0


def test_finetune_artifact_must_match_the_corpus(other_model_dir, tiny_artifact, tmp_path, write_corpus):
    from pipeline.commands.finetune import run as finetune_run
    from tests.support import STAGE1_TEXTS

    corpus = write_corpus([{"id": "doc-0", "text": STAGE1_TEXTS[0]}, {"id": "doc-1", "text": "other text"}])
    cfg = finetune_cfg(other_model_dir, corpus, tmp_path, "source=artifact", f"artifact={tiny_artifact}")
    with pytest.raises(PipelineError, match="training document 'doc-1' does not match"):
        finetune_run(cfg)
    with pytest.raises(PipelineError, match="max_length=4096 exceeds"):
        finetune_run(finetune_cfg(other_model_dir, corpus, tmp_path, "max_length=4096"))


def test_trainer_ce_equals_the_trainers_own_loss(other_model_dir, tmp_path):
    """CE through LongCETrainer.compute_loss is the Trainer's default loss, with and without the
    token count of the optimizer step (gradient accumulation, several devices)."""
    from transformers import Trainer

    from pipeline.training import trainer as finetune
    from pipeline.training.sequences import RightPadCollator

    lm = load_model(str(other_model_dir), dtype="float64", device="cpu")
    args = finetune.training_arguments(tmp_path, {"report_to": "none"}, "cpu", 0)
    trainer = finetune.LongCETrainer(model=lm.model, args=args, longce=longce("ce"))
    batch = RightPadCollator(1)([{"input_ids": list(range(2, 30))}, {"input_ids": list(range(5, 20))}])
    for n in (None, torch.tensor(60)):
        ours = trainer.compute_loss(lm.model, batch, num_items_in_batch=n)
        theirs = Trainer.compute_loss(trainer, lm.model, batch, num_items_in_batch=n)
        torch.testing.assert_close(ours.float(), theirs.float(), rtol=1e-6, atol=0)


def cli(*args: str, nproc: int = 1):
    import subprocess
    import sys

    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    command = [*(launcher if nproc > 1 else [sys.executable]), "-m", "pipeline.commands.finetune", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_finetune_cli_data_parallel_equals_one_process(other_model_dir, stage1_corpus, tmp_path):
    """`python -m pipeline.commands.finetune` (the make target's command), and under torchrun with 2 processes
    (gloo on CPU, as DDP on GPUs): one step on the same 2 documents gives the same model and loss as
    one process with both in its batch, so the loss is normalised over the whole step."""
    from safetensors.torch import load_file

    common = [
        "model=local", f"model.spec={other_model_dir}", "corpus=local", f"corpus.path={stage1_corpus}",
        "num_documents=2", "K=16", "d=8", "max_length=60", "device=cpu", "dtype=float64",
        "training.max_steps=1", "training.warmup_steps=0", "training.learning_rate=1e-3",
        "training.save_strategy=no", "training.disable_tqdm=true", f"hydra.run.dir={tmp_path}/logs",
    ]  # fmt: skip
    one = cli(*common, f"output_dir={tmp_path}", "name=one", "training.per_device_train_batch_size=2")
    two = cli(*common, f"output_dir={tmp_path}", "name=two", nproc=2)
    assert one.returncode == 0, one.stderr[-2000:]
    assert two.returncode == 0, two.stderr[-2000:]
    loss = {}
    for name in ("one", "two"):
        rows = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        loss[name] = json.loads(rows[0])
    assert loss["one"]["tokens"] == loss["two"]["tokens"] == 2 * 59
    assert loss["one"]["loss"] == pytest.approx(loss["two"]["loss"], rel=1e-6)  # logged in float32
    assert loss["one"]["weight_max"] == 5.0
    weights = [load_file(tmp_path / name / "final" / "model.safetensors") for name in ("one", "two")]
    base = load_file(other_model_dir / "model.safetensors")
    for key, value in weights[0].items():
        torch.testing.assert_close(value, weights[1][key], rtol=1e-9, atol=1e-12)
    assert any(not torch.equal(v, base[k]) for k, v in weights[0].items())


def test_finetune_cli_errors_are_one_line(other_model_dir, stage1_corpus, tmp_path):
    done = cli(
        "model=local", f"model.spec={other_model_dir}", "corpus=local", f"corpus.path={stage1_corpus}",
        "gamma=0", f"output_dir={tmp_path}", f"hydra.run.dir={tmp_path}/logs",
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == "error: setting gamma=0: Input should be greater than 0"
