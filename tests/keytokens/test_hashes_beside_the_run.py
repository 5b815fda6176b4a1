"""A local evaluator's weight hashes never hold up the first text: they are computed beside the texts and
waited for at the end, where weights other than those the run computed with stop it before it records
anything (stage 1: no manifest; stage 2: no results line). The identity recorded is the hashed one."""

from __future__ import annotations

import json
import os
import shutil
import threading

import pytest

from pipeline.artifact.schema import settings_fingerprint
from pipeline.keytokens import stage, step
from pipeline.models import weight_hashes
from pipeline.models.weight_hashes import WeightHashing, WeightsChanged
from pipeline.provenance import file_sha256
from pipeline.score import engine
from tests.support import compose_config, compose_keytokens, keytokens_overrides, run_keytokens

WEIGHTS = "model.safetensors"


def stage1(model_dir, corpus, out, cache):
    return compose_keytokens(keytokens_overrides(model_dir, corpus, out, f"cache_dir={cache}"))


def copied(tiny_model_dir, tmp_path):
    """A copy of the tiny checkpoint: a file version no record knows."""
    return shutil.copytree(tiny_model_dir, tmp_path / "model")


def watched(monkeypatch, owner, attr: str, order: list, gate: threading.Event) -> None:
    """``owner.attr`` appends "text" to ``order`` and opens ``gate`` at its first call."""
    inner = getattr(owner, attr)

    def first_text(*args, **kwargs):
        if not gate.is_set():
            order.append("text")
            gate.set()
        return inner(*args, **kwargs)

    monkeypatch.setattr(owner, attr, first_text)


def held_hashes(monkeypatch, order: list, gate: threading.Event) -> None:
    """Hashing that ends only once ``gate`` is open (or after 5 s), appending "hashed" to ``order``."""

    def held(path, *args):
        gate.wait(5)
        order.append("hashed")
        return file_sha256(path, *args)

    monkeypatch.setattr(weight_hashes, "file_sha256", held)


def test_stage1_computes_its_first_text_before_the_hashes_end_and_records_them(
    tiny_model_dir, tiny_artifact, tmp_path, monkeypatch
):
    model = copied(tiny_model_dir, tmp_path)
    order, gate = [], threading.Event()
    held_hashes(monkeypatch, order, gate)
    watched(monkeypatch, step, "keytoken_tables", order, gate)
    corpus = tiny_artifact.parent / "corpus.jsonl"
    manifest = run_keytokens(stage1(model, corpus, tmp_path / "out", tmp_path / "c"))
    assert order[0] == "text" and "hashed" in order
    evaluator = manifest["settings"]["evaluator"]
    assert evaluator["weights_sha256"] == {WEIGHTS: file_sha256(model / WEIGHTS)}
    assert manifest["fingerprint"] == settings_fingerprint(manifest["settings"])  # of the hashed record


def test_stage1_resumed_with_other_weights_computes_then_refuses_to_finish(
    tiny_model_dir, tiny_artifact, tmp_path, monkeypatch
):
    """A run interrupted after one document recorded the weights' hashes (known: this process hashed
    them before); the rerun (another process: nothing known) hashes them anew beside its texts, finds
    other weights after it computed the rest, and stops without a manifest, saying why."""
    model, out = copied(tiny_model_dir, tmp_path), tmp_path / "out"
    corpus = tiny_artifact.parent / "corpus.jsonl"
    WeightHashing(model).result()  # known to the first run
    writes = []

    def one_part_then_stop(self, index, *tables):
        if writes:
            raise KeyboardInterrupt
        writes.append(index)
        return inner(self, index, *tables)

    inner = stage.ArtifactWriter.write_part
    with monkeypatch.context() as patch:
        patch.setattr(stage.ArtifactWriter, "write_part", one_part_then_stop)
        with pytest.raises(KeyboardInterrupt):
            run_keytokens(stage1(model, corpus, out, tmp_path / "a"))
    recorded = json.loads((out / "test" / "run.json").read_text())["settings"]["evaluator"]["weights_sha256"]
    assert recorded == {WEIGHTS: file_sha256(model / WEIGHTS)}
    computed = []
    monkeypatch.setattr(weight_hashes, "HASHED", {})  # another process
    watched(monkeypatch, step, "keytoken_tables", computed, threading.Event())
    monkeypatch.setattr(weight_hashes, "file_sha256", lambda path, *args: "0" * 64)  # other weights
    with pytest.raises(
        WeightsChanged,
        match=r"has sha256 000000000000\.\.\., not the [0-9a-f]{12}\.\.\. that .*run\.json recorded",
    ):
        run_keytokens(stage1(model, corpus, out, tmp_path / "b"))
    assert computed == ["text"] and not (out / "test" / "manifest.json").exists()


def test_stage2_scores_before_the_hashes_end_and_writes_no_line_for_weights_changed_meanwhile(
    tiny_model_dir, tiny_artifact, tmp_path, monkeypatch
):
    from pipeline.commands.score import run

    model, results = copied(tiny_model_dir, tmp_path), tmp_path / "scores.jsonl"
    overrides = ["model=local", f"model.spec={model}", f"artifact={tiny_artifact}", f"results={results}",
                 "dtype=float64", "device=cpu", "progress=false", f"cache_dir={tmp_path / 'c'}"]  # fmt: skip
    order, gate = [], threading.Event()
    held_hashes(monkeypatch, order, gate)
    watched(monkeypatch, engine, "sequence_logprobs", order, gate)
    run(compose_config("score", overrides))
    assert order[0] == "text"
    line = json.loads(results.read_text())
    assert line["model"]["weights_sha256"] == {WEIGHTS: file_sha256(model / WEIGHTS)}

    def touched(*args, **kwargs):
        os.utime(model / WEIGHTS)  # the checkpoint rewritten while the texts are scored
        return inner(*args, **kwargs)

    inner = engine.sequence_logprobs
    monkeypatch.setattr(engine, "sequence_logprobs", touched)
    with pytest.raises(WeightsChanged, match="changed while the run used it"):
        run(compose_config("score", [*overrides[:-1], f"cache_dir={tmp_path / 'd'}"]))
    assert len(results.read_text().splitlines()) == 1
