"""A model's identity, recorded with every result: its weights, its tokenizer, its config and the
remote code that ran, and the Hub commit it was loaded at (a model in memory by a hash of its
parameters, tokenizer and config). Two models of one name are two entries, never one."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from pipeline import api
from pipeline.models import weight_hashes
from pipeline.models.loading import load_model
from pipeline.models.weight_hashes import file_version
from pipeline.results.entries import select
from pipeline.results.keys import model_key
from pipeline.results.score import read_lines, read_scores
from tests.support import (
    STAGE1_TEXTS,
    compose_keytokens,
    keytokens_overrides,
    run_keytokens,
    save_tiny_model,
    score,
    swap_two_token_ids,
)


def test_two_models_of_one_name_are_two_entries(other_model_dir, tiny_model_dir, tiny_artifact, tmp_path):
    score(other_model_dir, tiny_artifact, tmp_path, "model.name=same")
    score(tiny_model_dir, tiny_artifact, tmp_path, "model.name=same")
    board = select(read_scores(tmp_path / "scores.jsonl"))
    assert board.height == 2 and all(name.startswith("same[model=") for name in board["entry"])


def test_two_models_in_memory_of_one_name_are_two_entries(tokenizer, tiny_artifact, tmp_path):
    """A model in memory is recorded with a hash of its parameters and tokenizer: two checkpoints of one
    name are two entries, one checkpoint scored twice is one."""
    results = tmp_path / "scores.jsonl"
    first, second = (
        load_model(str(save_tiny_model(tmp_path / f"m{seed}", tokenizer, seed=seed)), dtype="float64")
        for seed in (3, 4)
    )
    for lm in (first, second, first):
        api.score(lm.model, lm.tokenizer, tiny_artifact, results_file=results, model_name="ckpt")
    models = [obj["model"] for _, obj, _ in read_lines(results)]
    assert models[0] == models[2] != models[1] and models[0]["weights_sha256"]["parameters"]
    assert select(read_scores(results)).height == 2


def test_a_model_folder_with_another_tokenizer_is_another_model(other_model_dir, tiny_artifact, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(other_model_dir, folder)
    before = score(folder, tiny_artifact, tmp_path)
    swap_two_token_ids(folder / "tokenizer.json", STAGE1_TEXTS[0])
    after = score(folder, tiny_artifact, tmp_path)
    assert before["model"]["weights_sha256"] == after["model"]["weights_sha256"]
    assert before["model"]["tokenizer_sha256"] != after["model"]["tokenizer_sha256"]
    assert before["result_id"] != after["result_id"]
    assert select(read_scores(tmp_path / "scores.jsonl")).height == 2


def test_a_forged_weight_hash_record_never_gives_another_models_identity(
    tokenizer, tiny_artifact, tmp_path, monkeypatch
):
    """Two checkpoints of one config and tokenizer: an entry of the cache folder's ``weight-hashes.json``
    (as 803d062 kept it: the file's version and a sha256) giving checkpoint a the weights hash of b
    recorded a's numbers under b's identity, one leaderboard entry. The hashes are read in each process."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("LONGPPL_CACHE", str(cache))
    a, b = (save_tiny_model(tmp_path / name, tokenizer, seed=seed) for name, seed in (("a", 3), ("b", 4)))
    genuine = score(b, tiny_artifact, tmp_path, "model.name=ckpt")
    weights = (a / "model.safetensors").resolve()
    claimed = genuine["model"]["weights_sha256"]["model.safetensors"]
    cache.mkdir(exist_ok=True)
    forged = {str(weights): {"stat": file_version(weights), "sha256": claimed}}
    (cache / "weight-hashes.json").write_text(json.dumps(forged))
    monkeypatch.setattr(weight_hashes, "HASHED", {}, raising=False)  # a new process
    other = score(a, tiny_artifact, tmp_path, "model.name=ckpt")
    assert other["corpus"]["ppl"] != genuine["corpus"]["ppl"]
    assert model_key(other["model"]) != model_key(genuine["model"])
    assert select(read_scores(tmp_path / "scores.jsonl")).height == 2


@pytest.fixture
def hub(tmp_path, monkeypatch, tokenizer):
    """A local Hub cache (HF_HUB_CACHE) with the model org/tiny; ``publish(commit, seed)`` adds a commit
    of other weights and moves refs/main onto it."""
    root = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(root))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)

    def publish(commit: str, seed: int) -> None:
        repo = root / "models--org--tiny"
        save_tiny_model(repo / "snapshots" / commit, tokenizer, seed=seed)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(commit)

    return publish


def test_a_hub_model_is_recorded_with_the_commit_loaded(hub, tiny_artifact, tmp_path):
    hub("a" * 40, seed=3)
    first = score("org/tiny", tiny_artifact, tmp_path)
    assert first["model"]["revision"] == "a" * 40 and first["model"]["tokenizer_sha256"]
    hub("b" * 40, seed=4)  # refs/main moves
    second = score("org/tiny", tiny_artifact, tmp_path)
    assert second["model"]["revision"] == "b" * 40 and second["result_id"] != first["result_id"]
    assert second["corpus"]["ppl"] != first["corpus"]["ppl"]  # other weights were loaded, and recorded
    board = select(read_scores(tmp_path / "scores.jsonl"))
    assert board.height == 2 and all(name.startswith("org/tiny[model=") for name in board["entry"])
    pinned = score("org/tiny", tiny_artifact, tmp_path, "model.revision=" + "a" * 40)
    assert pinned["model"]["revision"] == "a" * 40 and pinned["corpus"] == first["corpus"]


def test_stage1_records_a_hub_evaluator_by_its_commit(hub, write_corpus, tmp_path):
    hub("c" * 40, seed=0)
    corpus = write_corpus([{"id": f"doc-{i}", "text": t} for i, t in enumerate(STAGE1_TEXTS[:1])])
    manifest = run_keytokens(compose_keytokens(keytokens_overrides("org/tiny", corpus, tmp_path / "out")))
    assert manifest["settings"]["evaluator"]["revision"] == "c" * 40


def edit_rope_theta(config: dict) -> dict:
    """The config with its rope theta changed (transformers 5 keeps it in ``rope_parameters``)."""
    if isinstance(config.get("rope_parameters"), dict):
        config["rope_parameters"]["rope_theta"] = config["rope_parameters"].get("rope_theta", 10000.0) * 2
    else:
        config["rope_theta"] = config.get("rope_theta", 10000.0) * 2
    return config


def test_a_local_models_identity_covers_its_config_and_remote_code(tiny_model_dir, tmp_path):
    """rope_theta edited in a local model's config.json took PPL from 19.80 to 21.75 under one identity
    and one result id; with trust_remote_code, the folder's code runs too."""
    import shutil

    from pipeline.models.loading import load_model
    from pipeline.results.keys import model_key

    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    before = load_model(str(folder), dtype="float64", device="cpu").source.to_dict()
    assert set(before["config_sha256"]) >= {"config.json"}
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(edit_rope_theta(config)))
    after = load_model(str(folder), dtype="float64", device="cpu").source.to_dict()
    assert after["weights_sha256"] == before["weights_sha256"] and model_key(after) != model_key(before)
    (folder / "helpers.py").write_text("X = 1\n")
    trusted = load_model(str(folder), dtype="float64", device="cpu", trust_remote_code=True).source.to_dict()
    assert "helpers.py" in trusted["config_sha256"] and "helpers.py" not in after["config_sha256"]


def test_a_model_in_memorys_identity_covers_its_config(tiny_model_dir, tokenizer):
    from pipeline.models.identity import identify_in_memory
    from pipeline.models.loading import in_memory, load_model
    from pipeline.results.keys import model_key

    model = load_model(str(tiny_model_dir), dtype="float64", device="cpu").model
    keys = []
    for _ in range(2):
        lm = in_memory(model, tokenizer, "tiny")
        identify_in_memory(lm.source, lm.model, lm.tokenizer)
        keys.append(model_key(lm.source.to_dict()))
        model.config.rope_parameters["rope_theta"] *= 2  # in place, as a user might
    assert keys[0] != keys[1]


def test_a_hub_models_remote_code_is_hashed_where_it_ran(tmp_path):
    """trust_remote_code: the code transformers copied into its dynamic modules (a repo's auto_map may
    name another repo's code, at that repo's newest commit) is hashed by its path there."""
    import importlib.util

    from pipeline.models.identity import remote_code_sha256

    folder = tmp_path / "transformers_modules" / "org" / "code_repo" / "abc123"
    folder.mkdir(parents=True)
    (folder / "modeling_x.py").write_text("class XModel:\n    pass\n")
    (folder / "configuration_x.py").write_text("A = 1\n")
    spec = importlib.util.spec_from_file_location(
        "transformers_modules.org.code_repo.abc123.modeling_x", folder / "modeling_x.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        found = remote_code_sha256(module.XModel(), object())
    finally:
        del sys.modules[spec.name]
    assert sorted(found) == ["org/code_repo/abc123/configuration_x.py", "org/code_repo/abc123/modeling_x.py"]
