"""The third red team's weak cases, made clean: one ``error:`` line and exit status 2 on the command line
(one PipelineError in the API), before any slow work, nothing lost; or the behaviour the README states.
lm-eval's caches are keyed by the model and the artifact scored, as results are (test_trust_round3.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys

import numpy as np
import pytest

from pipeline import api
from pipeline.api.dropin import compute_longppl
from pipeline.artifact import inputs
from pipeline.artifact.reader import load_artifact
from pipeline.commands import leaderboard as leaderboard_command
from pipeline.commands import publish as publish_command
from pipeline.errors import PipelineError
from pipeline.files import umask
from pipeline.models import gguf
from pipeline.models.loading import load_model
from pipeline.official.span_files import format_spans
from pipeline.results import lines
from tests.conftest import ROOT, STAGE1_TEXTS, build_model, compose_config
from tests.test_cli_errors import cli, error_lines
from tests.test_leaderboard import base_rows, write_lines
from tests.test_trust_round3 import swap_two_token_ids

lm_eval = pytest.importorskip("lm_eval", reason="needs lm-eval: `make setup-lmeval` (make test installs it)")

from lm_eval.api.model import CachingLM  # noqa: E402

from pipeline.lmeval import LongPPLLM, task_manager  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float64", device="cpu")


def run_cli(module: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, env=environment, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip


def one_error(done: subprocess.CompletedProcess) -> str:
    """The one ``error:`` line of a command that failed cleanly (exit status 2, no traceback)."""
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("error: ")]
    return line


# ----------------------------------------------------------------------------------------------
# lm-eval


def test_use_cache_holds_the_answers_of_one_model(tiny_model_dir, other_model_dir, tmp_path):
    """lm-eval answers --use_cache requests by their text alone: a database another model (or other
    settings) filled is refused before any request runs; the same model and settings reuse it."""
    db = str(tmp_path / "cache.db")
    first = LongPPLLM(str(tiny_model_dir), dtype="float64", device="cpu")
    CachingLM(first, db)
    CachingLM(LongPPLLM(str(tiny_model_dir), dtype="float64", device="cpu"), db)  # the same: reused
    for other in (
        LongPPLLM(str(other_model_dir), dtype="float64", device="cpu"),
        LongPPLLM(str(tiny_model_dir), dtype="float64", device="cpu", context_limit=16),
    ):
        with pytest.raises(
            PipelineError, match=r"--use_cache database .* holds the answers of another model"
        ):
            CachingLM(other, db)


def test_cache_requests_of_another_artifact_of_the_same_name(tiny, tiny_artifact, tmp_path, monkeypatch):
    """lm-eval keys --cache_requests by the task's name, which two artifacts named alike share: the
    cached requests of the other are refused, with the fix, before any request runs."""
    monkeypatch.setattr("lm_eval.caching.cache.PATH", str(tmp_path / "requests"))
    texts = {f"doc-{i}": text.replace("e", "a") for i, text in enumerate(STAGE1_TEXTS)}  # other texts
    keytokens = api.find_key_tokens(texts, tiny.model, tiny.tokenizer, K=16, d=8)
    other = api.save_key_tokens(keytokens, tmp_path / "b" / tiny_artifact.name)
    model = LongPPLLM(tiny)

    def run(artifact):
        return lm_eval.simple_evaluate(
            model=model, tasks=[f"longppl_{artifact.name}"], bootstrap_iters=0, cache_requests=True,
            task_manager=task_manager([artifact], root=tmp_path / "none"),
        )  # fmt: skip

    run(tiny_artifact)  # cached: the requests of longppl_test
    with pytest.raises(PipelineError, match=rf"document 'doc-0' of another artifact than {other}.*refresh"):
        run(other)


def test_model_hf_with_a_longppl_task_stops_before_any_request(tiny_model_dir, tiny_artifact):
    done = run_cli(
        "pipeline.commands.lm_eval",
        "--model", "hf", "--model_args", f"pretrained={tiny_model_dir}", "--artifact",
        str(tiny_artifact), "--tasks", f"longppl_{tiny_artifact.name}", "--device", "cpu",
        HF_DATASETS_OFFLINE="1",
    )  # fmt: skip
    assert one_error(done) == (
        f"error: task longppl_{tiny_artifact.name} needs the per-token log-probs of --model longppl, not "
        "--model HFLM: run the LongPPL tasks with --model longppl (the default)"
    )
    assert "loglikelihood_rolling requests" not in done.stderr  # no request ran


def test_a_torn_lmeval_results_file_is_named(tmp_path, capsys):
    scores = write_lines(tmp_path / "scores.jsonl", base_rows())
    (tmp_path / "lm-eval" / "m").mkdir(parents=True)
    torn = tmp_path / "lm-eval" / "m" / "results_2026-11-22T00-00-00.json"
    torn.write_text('{"results": {"longppl_x": {"longppl,none": 3.5')
    leaderboard_command.run(
        compose_config("leaderboard", [f"results={scores}", f"out_dir={tmp_path / 'out'}"])
    )
    assert (
        f"left out {torn}: not an lm-eval results file that reads (is not valid JSON"
        in capsys.readouterr().out
    )


# ----------------------------------------------------------------------------------------------
# The ladder and results files


def test_ladder_bootstrap_has_an_upper_bound(tmp_path):
    done = cli(
        "pipeline.commands.ladder",
        "model=local",
        f"model.spec={tmp_path / 'no-model'}",
        "bootstrap=10000000000",
    )
    assert error_lines(done.stderr) == [] and one_error(done) == (
        "error: setting bootstrap=10000000000: Input should be less than or equal to 100000"
    )


def test_a_torn_line_never_costs_the_others(tmp_path, capsys):
    """A write killed mid-line leaves a line cut short; the next append starts a new line, and every
    reader skips the torn one with a note: `make leaderboard` shows all the others."""
    rows = base_rows()
    path = write_lines(tmp_path / "scores.jsonl", rows[:2])
    with path.open("a") as f:
        f.write(json.dumps(rows[2])[:150])  # killed after 150 bytes
    lines.append(path, rows[2])
    paths = leaderboard_command.run(
        compose_config("leaderboard", [f"results={path}", f"out_dir={tmp_path / 'out'}"])
    )
    assert paths["leaderboard.csv"].read_text().count("\n") == 4  # the header and three entries
    assert (
        "line 3 was cut short (a write that was killed, or a full disk): skipped" in capsys.readouterr().err
    )


# ----------------------------------------------------------------------------------------------
# Configuration


def fake_gguf(path):
    """A file with a valid GGUF header (its contents are read by ``read_gguf``, replaced in tests)."""
    path.write_bytes(gguf.HEADER.pack(gguf.MAGIC, 3, 0, 0) + b"\0" * 64)
    return path


def test_a_cache_folder_that_is_a_file(tiny_artifact, tmp_path):
    model = fake_gguf(tmp_path / "m.gguf")
    (tmp_path / "cache").write_text("not a folder")
    done = run_cli(
        "pipeline.commands.score", "model=local", f"model.spec={model}", f"results={tmp_path / 's.jsonl'}",
        f"artifact={tiny_artifact}",
        LONGPPL_CACHE=str(tmp_path / "cache"),
    )  # fmt: skip
    assert one_error(done) == (
        f"error: the pipeline's cache folder {tmp_path / 'cache'} ($LONGPPL_CACHE or cache_dir=) cannot be "
        f"made: {tmp_path / 'cache'} is a file; point LONGPPL_CACHE (or cache_dir=) at a folder"
    )


def test_results_that_cannot_be_written_fail_before_the_model_runs(other_model_dir, tiny_artifact, tmp_path):
    (tmp_path / "file").write_text("")
    done = cli(
        "pipeline.commands.score", "--multirun", "model=local", f"model.spec={other_model_dir}",
        f"artifact={tiny_artifact}", f"results={tmp_path},{tmp_path / 'file' / 'scores.jsonl'}", "device=cpu",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )  # fmt: skip
    found = sorted(line.split("] ", 1)[1] for line in error_lines(done.stderr))
    under_a_file = f"{tmp_path / 'file'} is a file, not a folder: pass a path in a folder"
    assert found == sorted([
        f"results={tmp_path / 'file' / 'scores.jsonl'}: {under_a_file}",
        f"results={tmp_path} is a folder: pass a file in it, e.g. {tmp_path / 'results.jsonl'}",
    ])  # fmt: skip
    assert "PPL" not in done.stdout  # nothing was scored
    with pytest.raises(PipelineError, match=r"results_file=.* is a folder"):
        api.score(None, None, tiny_artifact, results_file=tmp_path)


def test_publish_again_after_a_failed_upload(tiny_artifact, tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    cfg = compose_config(
        "publish", [f"artifact={tiny_artifact}", "repo=org/keytokens", f"out_dir={tmp_path / 'up'}"]
    )
    for _ in range(2):  # the rerun prepares the folder anew and tries the upload again
        with pytest.raises(PipelineError, match="could not upload to the Hub dataset 'org/keytokens'"):
            publish_command.run(cfg)
    assert load_artifact(tmp_path / "up").contents == load_artifact(tiny_artifact).contents


@pytest.fixture
def conversion(tmp_path, monkeypatch, tokenizer):
    """A GGUF file's cached conversion (the file's reading replaced by the tiny model) in LONGPPL_CACHE."""
    monkeypatch.setenv("LONGPPL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(
        gguf, "read_gguf", lambda path: (tokenizer, build_model("llama", len(tokenizer)).float())
    )
    model = fake_gguf(tmp_path / "tiny.gguf")
    folder, sha = gguf.convert_gguf(model)
    return model, folder, sha


def test_the_cached_conversion_has_the_umask_modes(conversion):
    _, folder, _ = conversion
    mask = 0o666 & ~umask()
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}
    assert modes["model.safetensors"] == mask and set(modes.values()) == {mask}
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~umask()


def test_a_damaged_cached_tokenizer_is_blamed_not_the_artifact(conversion, tiny_artifact):
    """The artifact's evaluator, as if it were this GGUF file: its cached conversion's tokenizer.json
    with two ids swapped is named as the damaged cache (delete it), not as the artifact's fault."""
    model, folder, sha = conversion
    art = load_artifact(tiny_artifact, verify_hashes=False)
    manifest = json.loads(json.dumps(art.manifest))
    manifest["settings"]["evaluator"] = {
        "spec": str(model),
        "kind": "gguf",
        "path": str(model),
        "file_sha256": sha,
    }
    as_gguf = dataclasses.replace(art, manifest=manifest)
    assert inputs.check_now(as_gguf)[0]["tokenizer"] == f"re-tokenised with {model}'s tokenizer"
    swap_two_token_ids(folder / "tokenizer.json", STAGE1_TEXTS[0])
    with pytest.raises(
        PipelineError, match=rf"cached GGUF conversion {folder} is damaged .*: tokenizer\.json is"
    ):
        inputs.check_now(as_gguf)
    with pytest.raises(PipelineError, match=rf"cached GGUF conversion {folder} is damaged"):
        gguf.convert_gguf(model)  # and so is loading the model from it


# ----------------------------------------------------------------------------------------------
# The drop-in and the API


def test_dropin_and_api_arguments(tiny, tiny_artifact, tmp_path):
    model, tokenizer = tiny.model, tiny.tokenizer
    text = STAGE1_TEXTS[0]
    pair = (model, model, tokenizer, tokenizer)
    cases = [
        (lambda: compute_longppl(text, *pair, trunc_len=True), "setting trunc_len=True: True is a boolean"),
        (lambda: api.find_key_tokens([text], model, tokenizer, K=True), "setting K=True: True is a boolean"),
        (lambda: compute_longppl("ab\ud800c", *pair), r"character 2 is a lone surrogate \(U\+D800\)"),
        (lambda: api.find_key_tokens(["ab\udfffc"], model, tokenizer), r"'doc-00000'.*lone surrogate"),
    ]
    for call, message in cases:
        with pytest.raises(PipelineError, match=message):
            call()
    as_text = compute_longppl(text, model, model, tokenizer, tokenizer, trunc_len="16", sliding_window=8)
    assert as_text == compute_longppl(
        text, model, model, tokenizer, tokenizer, trunc_len=16, sliding_window=8
    )
    assert api.score(model, tokenizer, tiny_artifact, documents=np.int64(1)).corpus["n_documents"] == 1


def test_dropin_text_longer_than_the_context_and_spans_past_its_end(tiny, tmp_path):
    model, tokenizer = tiny.model, tiny.tokenizer
    spans = tmp_path / "spans.txt"
    spans.write_text(format_spans(np.array([0]), np.array([5])))
    long = STAGE1_TEXTS[0] * 20
    with pytest.raises(PipelineError) as error:
        compute_longppl(long, model, None, tokenizer, save_path=str(spans))
    message = str(error.value)
    assert "more than its context of 512" in message and "pipeline.api.score(..., context_limit=" in message
    assert "pass context_limit=" not in message  # compute_longppl has no such argument
    spans.write_text(format_spans(np.array([10**6 - 5]), np.array([10**6])))  # saved for another text
    with pytest.raises(
        PipelineError, match=r"reach character 1000000, past the end of the text \(\d+ characters\)"
    ):
        compute_longppl(STAGE1_TEXTS[0], model, None, tokenizer, save_path=str(spans))
