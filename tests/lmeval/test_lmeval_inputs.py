"""What the lm-eval integration refuses before any request runs: a cache another model or another
artifact of the same name filled (``--use_cache``, ``--cache_requests``), a LongPPL task under another
model than ``longppl``, unknown task names (before lm-eval's task index loads); and a results file that
does not read is named on the leaderboard."""

from __future__ import annotations

import pytest

from pipeline import api
from pipeline.commands import leaderboard as leaderboard_command
from pipeline.errors import PipelineError
from pipeline.models.loading import load_model
from tests.support import STAGE1_TEXTS, base_rows, compose_config, one_error, run_cli, write_lines

lm_eval = pytest.importorskip("lm_eval", reason="needs lm-eval: `make setup-lmeval` (make test installs it)")

from lm_eval.api.model import CachingLM  # noqa: E402

from pipeline.lmeval import LongPPLLM, task_manager  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float64", device="cpu")


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


def test_an_unknown_lm_eval_task_is_refused_before_the_task_index(tiny_artifact, monkeypatch):
    lm_eval_tasks = pytest.importorskip("lm_eval.tasks", reason="needs lm-eval: `make setup-lmeval`")
    from pipeline.lmeval.command_line import run

    def index_loaded(*args, **kwargs):
        raise AssertionError("lm-eval's task index was loaded")

    monkeypatch.setattr(lm_eval_tasks.TaskManager, "__init__", index_loaded)
    with pytest.raises(
        PipelineError, match=r"^longppl_nosuch, hellaswagg: no such lm-eval task\. LongPPL tasks"
    ):
        run(
            [
                "--artifact",
                str(tiny_artifact),
                "--tasks",
                "longppl_nosuch,hellaswag",
                "hellaswagg",
                "--limit",
                "1",
            ]
        )


def test_known_lm_eval_names_are_left_to_lm_eval(tiny_artifact, tmp_path):
    pytest.importorskip("lm_eval", reason="needs lm-eval: `make setup-lmeval`")
    from pipeline.lmeval.names import unknown_tasks_in
    from pipeline.lmeval.task_files import task_directory, task_name

    ours = task_name(str(tiny_artifact))
    directory = task_directory([str(tiny_artifact)])
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "t.yaml").write_text("task: my_task\n")
    known = [ours, "longppl", "hellaswag", "arc_easy", "mmlu_*", "my_task", str(tmp_path / "t.yaml")]
    args = ["run", "--tasks", ",".join(known), "--include_path", str(tmp_path / "mine"), "--limit", "1"]
    assert unknown_tasks_in(args, directory) == []
    assert unknown_tasks_in(["--tasks", "arc_eas", "arc_easy_x"], directory) == ["arc_eas", "arc_easy_x"]
    assert unknown_tasks_in(["--tasks=my_task"], directory) == ["my_task"]  # without its --include_path
    assert unknown_tasks_in(["--config", "c.yaml", "--tasks", "nosuch"], directory) == []
    assert unknown_tasks_in(["validate", "--tasks", "nosuch"], directory) == []
