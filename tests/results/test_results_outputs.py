"""results= (and the API's results_file, ScoreJob(results=...)) appends only to a results file of its
own kind of line, never into an artifact's or a model's folder, and the append goes only where the
check found the file: a symlink swapped to an artifact's manifest while the model ran gets no line.
On 803d062 each of these appended a line to whatever regular file was named (the artifact then no
longer loaded)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from pipeline import api
from pipeline.commands import ladder as ladder_command
from pipeline.commands import score as score_command
from pipeline.errors import PipelineError
from pipeline.jobs import score as score_job
from pipeline.jobs.score import ScoreJob
from pipeline.models.loading import ModelChoice
from pipeline.outputs import Output, check
from pipeline.results import lines
from pipeline.results import score as score_lines
from pipeline.results.ladder import KIND as LADDER_LINES
from tests.support import base_rows, compose_config, genuine_line, write_lines

INSIDE_ARTIFACT = r"is an artifact's folder \(key-token tables and their manifest\), which `make score` never"
INSIDE_MODEL = r"is a model's folder \(its config.json beside weights or a tokenizer\), which `make score`"


@pytest.fixture
def victims(tiny_artifact, other_model_dir, tmp_path):
    """Copies of an artifact and of a model folder, and their bytes before the test."""
    artifact = Path(shutil.copytree(tiny_artifact, tmp_path / "artifact"))
    model = Path(shutil.copytree(other_model_dir, tmp_path / "model"))
    before = {p: p.read_bytes() for folder in (artifact, model) for p in folder.rglob("*") if p.is_file()}
    yield artifact, model
    assert {p: p.read_bytes() for p in before} == before, "a file of the artifact or the model changed"


def targets(artifact: Path, model: Path) -> dict[str, tuple[Path, str]]:
    """Each file a typo could name, and what the one line says of it."""
    return {
        "manifest": (artifact / "manifest.json", INSIDE_ARTIFACT),
        "tokens": (artifact / "tokens.parquet", INSIDE_ARTIFACT),
        "new file in the artifact": (artifact / "scores.jsonl", INSIDE_ARTIFACT),
        "config": (model / "config.json", INSIDE_MODEL),
    }


@pytest.mark.parametrize("name", ["manifest", "tokens", "new file in the artifact", "config"])
def test_make_score_refuses_an_artifacts_or_a_models_file_before_the_model_loads(
    victims, tmp_path, monkeypatch, name
):
    artifact, model = victims
    path, said = targets(artifact, model)[name]
    monkeypatch.setattr(ModelChoice, "load", lambda *a, **k: pytest.fail("the model loaded"))
    cfg = compose_config(
        "score",
        ["model=local", f"model.spec={model}", f"artifact={artifact}", f"results={path}", "device=cpu"],
    )
    with pytest.raises(PipelineError, match=rf"^results={re.escape(str(path))}: .* {said}"):
        score_command.run(cfg)
    assert not (artifact / "scores.jsonl").exists()


@pytest.mark.parametrize("name", ["manifest", "tokens", "config"])
def test_the_api_refuses_them_too(victims, tiny_model_dir, tokenizer, name):
    """``api.score(..., results_file=)`` and ``api.run(ScoreJob(results=))``, before anything is scored."""
    from transformers import AutoModelForCausalLM

    artifact, model = victims
    path, said = targets(artifact, model)[name]
    held = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with pytest.raises(PipelineError, match=rf"^results_file={re.escape(str(path))}: .* {said}"):
        api.score(held, tokenizer, artifact, results_file=path)
    job = ScoreJob(model=ModelChoice(spec=str(tiny_model_dir)), artifact=artifact, results=path)
    with pytest.raises(PipelineError, match=rf"^results={re.escape(str(path))}: .* {said}"):
        api.run(job)


def test_a_results_file_of_another_kind_or_no_results_file_is_refused(tmp_path, monkeypatch, other_model_dir):
    """make score appends only to scores lines, make ladder only to ladder lines; a file of other text
    (a JSON document, a CSV) is nobody's results file."""
    monkeypatch.setattr(ModelChoice, "load", lambda *a, **k: pytest.fail("the model loaded"))
    scores = write_lines(tmp_path / "scores.jsonl", base_rows())
    notes = tmp_path / "notes.json"
    notes.write_text(json.dumps({"a": 1}, indent=2))
    table = tmp_path / "table.csv"
    table.write_text("model,score\nx,1\n")
    for path in (notes, table):
        with pytest.raises(
            PipelineError, match=r"holds line \d, which is no scores line .*: `make score` appends"
        ):
            check(Output("results", path, score_lines.KIND))
    with pytest.raises(
        PipelineError, match=r"holds line 1, which is no ladder line .*`make ladder` appends only"
    ):
        overrides = [
            "model=local",
            f"model.spec={other_model_dir}",
            f"results={scores}",
            f"plot_dir={tmp_path}",
        ]
        ladder_command.run(compose_config("ladder", overrides))
    assert check(Output("results", scores, score_lines.KIND)).found is not None  # its own kind


def test_an_own_file_an_empty_one_and_one_with_a_torn_line_take_the_line(tmp_path):
    empty, torn = tmp_path / "empty.jsonl", tmp_path / "torn.jsonl"
    empty.write_text("")
    write_lines(torn, [genuine_line(), json.dumps(genuine_line())[:200]])
    for path in (empty, torn, tmp_path / "new" / "scores.jsonl"):
        score_lines.append(path, genuine_line())
        assert len(score_lines.read_lines(path)) == (2 if path == torn else 1)


def test_a_symlink_swapped_to_the_manifest_while_the_model_runs_gets_no_line(
    victims, tiny_model_dir, tmp_path, monkeypatch
):
    """The link led to a fresh file when checked; scoring swaps it to the manifest (a hook between the
    check and the write): the append refuses, the manifest stays as it was."""
    artifact, _ = victims
    fresh, link = tmp_path / "fresh.jsonl", tmp_path / "link.jsonl"
    fresh.write_text("")
    link.symlink_to(fresh)
    measured = score_job.score

    def score_then_swap(*args, **kwargs):
        result = measured(*args, **kwargs)
        link.unlink()
        link.symlink_to(artifact / "manifest.json")
        return result

    monkeypatch.setattr(score_job, "score", score_then_swap)
    job = ScoreJob(model=ModelChoice(spec=str(tiny_model_dir)), artifact=artifact, results=link)
    with pytest.raises(
        PipelineError,
        match=rf"^results={re.escape(str(link))} now leads to .*manifest.json, not to .*fresh.jsonl as when",
    ):
        api.run(job)
    assert fresh.read_text() == ""


def test_the_append_checks_the_file_it_opened(tmp_path):
    """A file replaced since the check (another inode) by one of another kind is refused; a new one
    made since by another run of the same kind is appended to."""
    path = tmp_path / "scores.jsonl"
    checked = check(Output("results", path, score_lines.KIND))  # nothing there yet
    path.write_text('{"a": 1}\n')  # another command's line appeared
    with pytest.raises(
        PipelineError, match=r"was replaced since it was checked, by line 1, which is no scores line"
    ):
        score_lines.append(checked, genuine_line())
    assert path.read_text() == '{"a": 1}\n'
    write_lines(path, [genuine_line()])  # another make score made it
    score_lines.append(checked, genuine_line())
    assert len(score_lines.read_lines(path)) == 2
    with pytest.raises(PipelineError, match=r"which is no ladder line"):
        lines.append(path, {"schema": "x"}, LADDER_LINES)  # a ladder line into a scores file
