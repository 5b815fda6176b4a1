"""The third red team's bad cases: what was scored is what the board shows. Two runs that differ in
model weights, tokenizer, settings or documents are never shown, compared, recorded or matched as one,
whatever their names, through every route (make score, the API, the ladder, refreshes, Hub models);
a context-limited run is named once. Each test here failed on 8f60266. The weak cases are in
test_trust_round3_weak.py."""

from __future__ import annotations

import csv
import json
import shutil

import pytest

from pipeline import api
from pipeline.commands import leaderboard as leaderboard_command
from pipeline.commands import leaderboard_refresh as refresh_command
from pipeline.errors import PipelineError
from pipeline.lmeval.model import display_name
from pipeline.models.loading import load_model
from pipeline.reporting import leaderboard
from pipeline.reporting.board import partial_notes, select
from pipeline.results import ladder as ladder_results
from pipeline.results.keys import context_name
from pipeline.results.scores import read_lines, read_scores
from pipeline.settings import ScoreSettings
from tests.conftest import (
    STAGE1_TEXTS,
    compose_keytokens,
    keytokens_overrides,
    run_keytokens,
    save_tiny_model,
)
from tests.test_ladder import ladder, score
from tests.test_refresh import refresh_config


@pytest.fixture(scope="module")
def other(other_model_dir):
    return load_model(str(other_model_dir), dtype="float64", device="cpu")


def board_rows(paths: dict) -> dict[str, dict]:
    return {r["model"]: r for r in csv.DictReader(paths["leaderboard.csv"].open())}


# ----------------------------------------------------------------------------------------------
# A run on part of the artifact (the API's documents=, the ladder's documents=)


def test_an_api_run_on_part_of_the_artifact_is_recorded_as_such_and_left_off(
    other, tiny_artifact, tmp_path, capsys
):
    """score(documents=1, results_file=...) records the document it scored, gets its own result id and
    never replaces the model's whole-artifact entry (it is left off the board, with a note); a line
    written before (schema 4, without the ids) is told by its per-document values."""
    results = tmp_path / "scores.jsonl"
    whole = api.score(other.model, other.tokenizer, tiny_artifact, results_file=results, model_name="m")
    part = api.score(
        other.model, other.tokenizer, tiny_artifact, documents=1, results_file=results, model_name="m"
    )
    (_, first, _), (_, second, _) = read_lines(results)
    assert "documents" not in first["settings"] and second["settings"]["documents"] == ["doc-0"]
    assert first["result_id"] != second["result_id"] and part.longppl != whole.longppl
    board = select(read_scores(results))
    assert board["entry"].to_list() == ["m"] and board["longppl"].to_list() == [whole.longppl]
    assert partial_notes(read_scores(results)) == [
        "left out line 2 (m, artifact test): scored on 1 of 3 documents, a partial run is no leaderboard "
        "entry"
    ]
    leaderboard_command.run(leaderboard_config(results, tmp_path / "out"))
    assert "left out line 2 (m, artifact test): scored on 1 of 3 documents" in capsys.readouterr().out
    older = {k: v for k, v in second.items()} | {"schema_version": 4}
    older["settings"] = {k: v for k, v in second["settings"].items() if k != "documents"}
    results.write_text(json.dumps(first) + "\n" + json.dumps(older) + "\n")
    assert select(read_scores(results))["longppl"].to_list() == [whole.longppl]


def leaderboard_config(results, out, *extra):
    from tests.conftest import compose_config

    return compose_config("leaderboard", [f"results={results}", f"out_dir={out}", *extra])


def test_a_ladder_on_part_of_the_artifact_is_no_effective_length(other_model_dir, tiny_artifact, tmp_path):
    score(other_model_dir, tiny_artifact, tmp_path)
    row = ladder(other_model_dir, tiny_artifact, tmp_path, "ladder=[16,64]", "documents=1")
    assert row["rungs"][-1]["corpus"]["n_documents"] == 1
    paths = leaderboard.render(
        read_scores(tmp_path / "scores.jsonl"), tmp_path / "out", ladder=tmp_path / "ladder.jsonl"
    )
    assert "effective length" not in paths["leaderboard.md"].read_text() and "ladder.png" not in paths


def test_a_ladder_shows_only_beside_the_entry_of_its_own_model_and_settings(
    other_model_dir, tiny_artifact, tmp_path
):
    """Ladders are matched to score entries by the model's identity and the settings, not by name: a
    score run with add_bos=false is not shown with a ladder run with add_bos=true; the entry of the
    same settings is. A hand-edited ladder whose effective length is not one of its rungs is refused."""
    score(other_model_dir, tiny_artifact, tmp_path, "add_bos=false")
    row = ladder(other_model_dir, tiny_artifact, tmp_path, "ladder=[16,64]")
    scores, ladders = tmp_path / "scores.jsonl", tmp_path / "ladder.jsonl"
    paths = leaderboard.render(read_scores(scores), tmp_path / "out", ladder=ladders)
    assert "effective length" not in paths["leaderboard.md"].read_text() and "ladder.png" not in paths
    score(other_model_dir, tiny_artifact, tmp_path)  # the ladder's own settings
    paths = leaderboard.render(read_scores(scores), tmp_path / "out", ladder=ladders)
    shown = {name: r["ladder_result_id"] for name, r in board_rows(paths).items()}
    assert sorted(shown.values()) == ["", row["result_id"]] and "ladder.png" in paths
    (with_bos,) = [name for name, rid in shown.items() if rid]
    assert "add_bos=true" in with_bos
    edited = json.loads(ladders.read_text())
    edited["effective"]["length"] = 32  # rungs: 16, 64, full context
    ladders.write_text(json.dumps(edited) + "\n")
    with pytest.raises(
        PipelineError,
        match=r"line 1 .*effective length at tolerance 0\.05 names a context limit that is not one of its "
        r"rungs \(32\)",
    ):
        ladder_results.read_rows(ladders)


# ----------------------------------------------------------------------------------------------
# Entries are keyed by the model, not its name


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


def swap_two_token_ids(path, text: str) -> None:
    """Swap the ids of two vocabulary entries that ``text`` uses (the file still loads)."""
    from tokenizers import Tokenizer

    spec = json.loads(path.read_text())
    ids = list(dict.fromkeys(Tokenizer.from_file(str(path)).encode(text).ids))[:2]
    vocab = spec["model"]["vocab"]
    names = {i: t for t, i in vocab.items() if i in ids}
    vocab[names[ids[0]]], vocab[names[ids[1]]] = ids[1], ids[0]
    path.write_text(json.dumps(spec))


# ----------------------------------------------------------------------------------------------
# Hub models: the commit loaded


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


# ----------------------------------------------------------------------------------------------
# Context-limited names


def test_a_context_limited_run_is_named_once_on_every_route(other_model_dir, tiny_artifact, tmp_path):
    row = score(other_model_dir, tiny_artifact, tmp_path, "context_limit=16")
    assert row["model_name"] == f"{other_model_dir.name}@ctx16"
    named = score(other_model_dir, tiny_artifact, tmp_path, "context_limit=16", "model.name=m@ctx512")
    assert named["model_name"] == "m@ctx16"  # a name never claims a limit the run did not have
    board = select(read_scores(tmp_path / "scores.jsonl"))
    assert sorted(board["entry"]) == sorted([f"{other_model_dir.name}@ctx16", "m@ctx16"])
    settings = ScoreSettings(context_limit=16)  # lm-eval's model names its runs the same way
    assert display_name(str(other_model_dir), {"name": "x@ctx16"}, settings, None) == "x@ctx16"
    assert context_name("x@ctx16@ctx16", None) == "x" and context_name("x", 8) == "x@ctx8"


# ----------------------------------------------------------------------------------------------
# Refreshes compare like with like


def test_a_refresh_compares_only_runs_of_the_same_model_and_settings(
    other_model_dir, tiny_artifact, tmp_path
):
    """With a context limit the refresh finds its results (named with @ctx16); a recorded result of
    other settings is not compared as if it were the run repeated; two models of one name are refused."""
    recorded = tmp_path / "recorded.jsonl"
    limited = ["+settings.context_limit=16"]
    refresh_command.run(refresh_config(tiny_artifact, other_model_dir, recorded, "record=true", *limited))
    refresh_command.run(refresh_config(tiny_artifact, other_model_dir, recorded, *limited))
    line = json.loads(recorded.read_text())
    line["settings"]["add_bos"] = False  # recorded with other settings (the numbers left as they are)
    recorded.write_text(json.dumps(line) + "\n")
    with pytest.raises(
        PipelineError,
        match=r"recorded result of tiny .*not of the run the refresh repeats \(add_bos: False recorded, "
        r"True now\)",
    ):
        refresh_command.run(refresh_config(tiny_artifact, other_model_dir, recorded, *limited))
    twice = f"[{{name: tiny, spec: '{other_model_dir}'}}, {{name: tiny, spec: '{other_model_dir}'}}]"
    with pytest.raises(PipelineError, match=r"setting models\.1: the name 'tiny' is already models\.0's"):
        refresh_command.run(refresh_config(tiny_artifact, None, recorded, "record=true", models=twice))
