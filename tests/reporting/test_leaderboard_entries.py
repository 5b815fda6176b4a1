"""What the leaderboard shows as one entry, and beside which entry: what was scored is what the board
shows. A run on part of the artifact is left off with a note; a ladder or a forgetting curve shows only
beside the entry of its own model and settings (a failed curve hides no good one); a context-limited
run is named once on every route; two results of one entry that differ are shown as a conflict."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline import api
from pipeline.commands import leaderboard as leaderboard_command
from pipeline.errors import PipelineError
from pipeline.forgetting import curve
from pipeline.lmeval.model import display_name
from pipeline.models.loading import load_model
from pipeline.reporting import leaderboard
from pipeline.reporting.forgetting import forgetting_png
from pipeline.results import entries as board
from pipeline.results import forgetting as forgetting_results
from pipeline.results import ladder as ladder_results
from pipeline.results.entries import partial_notes, select
from pipeline.results.keys import context_name
from pipeline.results.score import read_lines, read_scores
from pipeline.settings import ScoreSettings
from tests.support import ROOT, compose_config, genuine_line, ladder, score, write_lines
from tests.support import result_line as result
from tests.support import run_forgetting as run


@pytest.fixture(scope="module")
def other(other_model_dir):
    return load_model(str(other_model_dir), dtype="float64", device="cpu")


def board_rows(paths: dict) -> dict[str, dict]:
    return {r["model"]: r for r in csv.DictReader(paths["leaderboard.csv"].open())}


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


def test_one_entrys_results_that_differ_are_shown_as_a_conflict(tmp_path):
    """Two results of one model, one artifact identity and one set of settings, LongPPL-soft 11.9645
    and 20.5938: the board shows the conflict, never silently the newest (on f0729ca: 20.5938)."""
    first = genuine_line()
    second = copy.deepcopy(first) | {"date": "2027-01-01T00:00:00+00:00"}
    second["corpus"]["longppl_soft"] = 20.5938
    path = tmp_path / "scores.jsonl"
    path.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    paths = leaderboard.render(read_scores(path), tmp_path / "out")
    md = paths["leaderboard.md"].read_text()
    assert "conflict: smollm2-135m has 2 results of one model, artifact and settings" in md
    assert "longppl\\_soft 11.964512826254357 against 20.5938" in md.replace("longppl_soft", "longppl\\_soft")
    (row,) = list(csv.DictReader(paths["leaderboard.csv"].open()))
    assert row["longppl_soft"] == "" and row["longppl"] == "" and row["rank"] == ""
    path.write_text(
        json.dumps(first) + "\n" + json.dumps(first | {"date": "2027-01-01T00:00:00+00:00"}) + "\n"
    )
    again = leaderboard.render(read_scores(path), tmp_path / "o2")["leaderboard.csv"]
    (row,) = list(csv.DictReader(again.open()))
    assert row["longppl_soft"] == "11.9645" and row["rank"] == "1"  # equal results: one entry, no conflict
    embedded = OmegaConf.load(ROOT / "conf" / "refresh" / "embedded.yaml")
    assert embedded.tolerance == board.CONFLICT_TOLERANCE  # the refreshes' tolerance


def good_and_failed_runs(tiny_model_dir, corpus, out: Path, monkeypatch) -> tuple[dict, dict]:
    good = run(tiny_model_dir, corpus, out)

    def out_of_memory(scorer, ids, length):
        raise RuntimeError("out of memory (simulated)")

    with monkeypatch.context() as patch:
        patch.setattr(curve, "input_accuracy", out_of_memory)
        with pytest.raises(PipelineError, match=r"2 of 2 lengths failed"):
            run(tiny_model_dir, corpus, out)
    rows = forgetting_results.read_rows(out / "forgetting.jsonl")
    assert [r["complete"] for r in rows] == [True, False] and rows[0] == good
    return good, rows[1]


def score_of(run: dict) -> dict:
    """A score result of the forgetting run's model: its name and its identity (curves are matched by
    the model's identity, never by its name)."""
    return result(run["model_name"], (2.0, 1.5, 1.8), "2026-11-22T01:00:00+00:00") | {"model": run["model"]}


def test_a_failed_forgetting_run_hides_no_good_one(tiny_model_dir, corpus, tmp_path, monkeypatch):
    """Same model, same settings: the newer run failed at every length. Its picture goes to another
    file, and the leaderboard shows the good run's memory lengths."""
    good, failed = good_and_failed_runs(tiny_model_dir, corpus, tmp_path, monkeypatch)
    assert Path(good["plot"]) != Path(failed["plot"]) and Path(failed["plot"]).name.endswith(
        "-incomplete.png"
    )
    assert Path(good["plot"]).read_bytes() == forgetting_png(good)  # not overwritten
    scores = write_lines(tmp_path / "scores.jsonl", [score_of(good)])
    paths = leaderboard.render(
        read_scores(scores), tmp_path / "out", forgetting=tmp_path / "forgetting.jsonl"
    )
    (row,) = csv.DictReader(paths["leaderboard.csv"].open())
    memory = good["memory"]
    assert (row["fine_memory"], row["coarse_memory"]) == (str(memory["fine"]), str(memory["coarse"]))
    assert row["forgetting_result_id"] == good["result_id"]


def test_a_model_with_only_failed_runs_is_marked_incomplete(tiny_model_dir, corpus, tmp_path, monkeypatch):
    good, failed = good_and_failed_runs(tiny_model_dir, corpus, tmp_path, monkeypatch)
    only_failed = tmp_path / "failed.jsonl"
    only_failed.write_text(json.dumps(failed) + "\n")
    scores = write_lines(tmp_path / "scores.jsonl", [score_of(good)])
    paths = leaderboard.render(read_scores(scores), tmp_path / "out", forgetting=only_failed)
    md = paths["leaderboard.md"].read_text()
    assert "| incomplete | incomplete |" in md and "| 0 | 0 |" not in md
    assert (
        f"incomplete: {good['model_name']}: its forgetting curve ({failed['result_id']}) has no "
        "complete run, 2 of 2 lengths failed" in md
    )
    (row,) = csv.DictReader(paths["leaderboard.csv"].open())
    assert row["fine_memory"] == row["coarse_memory"] == ""


def test_a_curve_of_another_model_of_the_same_name_is_not_shown(tiny_model_dir, corpus, tmp_path):
    """Curves are matched to entries by the model's identity: a score line of the same name but other
    weights gets no memory lengths from this curve."""
    good = run(tiny_model_dir, corpus, tmp_path)
    other = result(good["model_name"], (2.0, 1.5, 1.8), "2026-11-22T01:00:00+00:00")  # its own model record
    assert other["model"] != good["model"]
    scores = write_lines(tmp_path / "scores.jsonl", [other])
    paths = leaderboard.render(
        read_scores(scores), tmp_path / "out", forgetting=tmp_path / "forgetting.jsonl"
    )
    (row,) = csv.DictReader(paths["leaderboard.csv"].open())
    assert not any(row.get(column) for column in ("fine_memory", "coarse_memory", "forgetting_result_id"))
    shown = leaderboard.render(
        read_scores(write_lines(tmp_path / "own.jsonl", [score_of(good)])),
        tmp_path / "own",
        forgetting=tmp_path / "forgetting.jsonl",
    )
    (row,) = csv.DictReader(shown["leaderboard.csv"].open())
    assert row["forgetting_result_id"] == good["result_id"]
