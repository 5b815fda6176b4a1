"""Reports under hostile or failed inputs: names with ``$`` or HTML, and forgetting-curve runs that
failed, never break a report nor hide a good result."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from pipeline.errors import PipelineError
from pipeline.forgetting import curve
from pipeline.reporting import leaderboard
from pipeline.reporting.forgetting_plot import forgetting_png
from pipeline.results import forgetting as forgetting_results
from pipeline.results.scores import read_scores
from tests.test_forgetting import corpus, run  # noqa: F401 (corpus is a fixture)
from tests.test_leaderboard import BENCHMARKS, base_rows, result, write_benchmarks, write_lines

HOSTILE = "x$^$y <img src=x onerror=alert(1)> [a](javascript:alert(1))"


def test_names_with_dollars_and_html_are_shown_literally(tmp_path):
    """A ``$...$`` in a name is read as math by matplotlib (``x$^$y`` crashed the leaderboard); HTML
    and links in a name went raw into leaderboard.md."""
    rows = [*base_rows(), result(HOSTILE, (20.0, 10.0, 12.0), "2026-11-22T09:00:00+00:00")]
    scores = write_lines(tmp_path / "s.jsonl", rows)
    bench = write_benchmarks(
        tmp_path / "b.csv", {**BENCHMARKS, HOSTILE: (1.0, 2.0, 3.0)}, "model,x$^$<b>y,b2,b3"
    )
    paths = leaderboard.render(read_scores(scores), tmp_path / "out", bench)
    assert paths["leaderboard.png"].read_bytes().startswith(b"\x89PNG")
    for name in ("leaderboard.md", "correlations.md"):
        md = paths[name].read_text()
        assert "<img" not in md.replace("\\<img", "") and "<b>" not in md.replace("\\<b\\>", "")
        assert "](javascript" not in md.replace("\\](javascript", "")
    assert (
        r"x$^$y \<img src=x onerror=alert(1)\> \[a\](javascript:alert(1))"
        in paths["leaderboard.md"].read_text()
    )
    assert {r["model"] for r in csv.DictReader(paths["leaderboard.csv"].open())} >= {HOSTILE}  # CSV: as is


def good_and_failed_runs(tiny_model_dir, corpus, out: Path, monkeypatch) -> tuple[dict, dict]:  # noqa: F811
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


def test_a_failed_forgetting_run_hides_no_good_one(tiny_model_dir, corpus, tmp_path, monkeypatch):  # noqa: F811
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


def test_a_model_with_only_failed_runs_is_marked_incomplete(tiny_model_dir, corpus, tmp_path, monkeypatch):  # noqa: F811
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


def test_a_curve_of_another_model_of_the_same_name_is_not_shown(tiny_model_dir, corpus, tmp_path):  # noqa: F811
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
