"""`make loogle`'s predictions file: named by the model's identity (two checkpoints in folders of one
name never share it), locked while a run writes it (a second run is refused in one line), and a
folder, FIFO or device at its path refused in one line before the model loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from pipeline.errors import PipelineError
from pipeline.jobs.loogle import predictions_name
from pipeline.models.loading import ModelChoice
from pipeline.provenance import json_sha256
from pipeline.results.keys import model_identity
from tests.support import ROOT, compose_config, loogle_run_overrides


def overrides(model_dir, out, *extra: str) -> list[str]:
    results = out / "results.jsonl"
    return loogle_run_overrides(model_dir, out, results, "bertscore=false", *extra, limit=1, new_tokens=2)


@pytest.fixture(scope="module")
def one_run(tiny_model_dir, tmp_path_factory):
    """A finished run of one question: its predictions folder and file."""
    from pipeline.commands.loogle import run as loogle

    out = tmp_path_factory.mktemp("loogle-run")
    loogle(compose_config("loogle", overrides(tiny_model_dir, out)))
    (path,) = out.glob("*--shortdep_qa--*.jsonl")
    return out, path


def test_the_file_is_named_by_the_models_identity(one_run, tiny_model_dir):
    path = one_run[1]
    line = json.loads(path.read_text().splitlines()[0])
    identity = json_sha256(model_identity(line["model_record"]))[:12]
    assert path.name == predictions_name(tiny_model_dir.name, identity, "shortdep_qa", "sample", "510")
    assert path.name == f"{tiny_model_dir.name}-{identity}--shortdep_qa--sample--L510.jsonl"
    other = {**line["model_record"], "weights_sha256": {"model.safetensors": "0" * 64}}
    assert json_sha256(model_identity(other))[:12] != identity  # another checkpoint: another file


def test_a_second_run_while_one_writes_is_refused(one_run, tiny_model_dir):
    from pipeline.commands.loogle import run as loogle

    out, path = one_run
    holder = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from pipeline.artifact.lock import exclusive
        with exclusive(Path({str(path)!r}), "LooGLE run"):
            print("held", flush=True)
            time.sleep(60)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout.readline().strip() == "held"
        with pytest.raises(
            PipelineError, match=r"another LooGLE run is writing .*: pid \d+ .*predictions_dir="
        ):
            loogle(compose_config("loogle", overrides(tiny_model_dir, out)))
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize("kind", ["folder", "fifo", "device", "dangling"])
def test_what_is_no_file_at_its_path_is_refused_before_the_model_loads(
    tmp_path, tiny_model_dir, monkeypatch, kind
):
    from pipeline.commands.loogle import run as loogle

    monkeypatch.setattr(ModelChoice, "load", lambda *a, **k: pytest.fail("the model loaded"))
    path = tmp_path / predictions_name(tiny_model_dir.name, "0123456789ab", "shortdep_qa", "sample", "510")
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero" if kind == "device" else tmp_path / "nowhere")
    expected = {"folder": "a folder", "fifo": "a FIFO", "device": "a device", "dangling": "a symlink to"}[
        kind
    ]
    with pytest.raises(PipelineError) as caught:
        loogle(compose_config("loogle", overrides(tiny_model_dir, tmp_path)))
    message = str(caught.value)
    assert f"predictions_dir={tmp_path}: {path.name} is {expected}" in message and "\n" not in message


def test_a_question_predicted_twice_says_which_line_to_delete(one_run, tiny_model_dir, tmp_path, monkeypatch):
    """A predictions file with a question twice told the user to "finish the run (make loogle resumes
    it)", the command that refused it: now both refuse it naming the two lines, and the fix."""
    import shutil

    from pipeline.commands.loogle import run as loogle
    from pipeline.loogle.data.reading import DataSource
    from pipeline.loogle.generation import answering
    from pipeline.loogle.metrics.evaluation import evaluate

    out = tmp_path / "out"
    shutil.copytree(one_run[0], out)
    path = out / one_run[1].name
    path.write_text(path.read_text() * 2)
    monkeypatch.setattr(answering, "decode_document", lambda *a: pytest.fail("a question was generated"))
    fix = r"line 2: question '.+#0' again \(first on line 1\): delete the line of the two"
    with pytest.raises(PipelineError, match=fix):
        evaluate(path, "shortdep_qa", DataSource(), "false")
    with pytest.raises(PipelineError, match=fix) as caught:
        loogle(compose_config("loogle", overrides(tiny_model_dir, out)))
    assert "make loogle resumes it" not in str(caught.value)
    path.write_text(path.read_text().splitlines(keepends=True)[0])  # the fix: the line deleted
    assert loogle(compose_config("loogle", overrides(tiny_model_dir, out)))["shortdep_qa"]["n_questions"] == 1
