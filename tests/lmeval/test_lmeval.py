"""LongPPL inside lm-evaluation-harness (``pipeline.lmeval``, `make lm-eval`): the model ``longppl``, the
tasks of key-token artifacts, their results files and the leaderboard reading them; lm-eval 0.4.13
itself, on tiny models (and one integration test on the embedded models)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.score.engine import Text

lm_eval = pytest.importorskip("lm_eval", reason="needs lm-eval: `make setup-lmeval` (make test installs it)")

from lm_eval.utils import handle_non_serializable  # noqa: E402

from pipeline import api  # noqa: E402
from pipeline.artifact.reader import load_artifact  # noqa: E402
from pipeline.errors import PipelineError  # noqa: E402
from pipeline.lmeval import LongPPLLM, LongPPLTask, task_manager  # noqa: E402
from pipeline.lmeval.results_schema import schema_problems  # noqa: E402
from pipeline.results.lmeval import read_lmeval_results  # noqa: E402
from tests.support import COMPUTE, ROOT, build_model, compose_config  # noqa: E402
from tests.support import check_compute_reached as check  # noqa: E402

METRICS = {"ppl": "ppl", "longppl": "longppl", "longppl_soft": "longppl_soft", "bits_per_byte": "bpb",
           "key_bits_per_byte": "key_bpb"}  # fmt: skip


def evaluate(model, tasks, manager, **options):
    results = lm_eval.simple_evaluate(
        model=model, tasks=tasks, task_manager=manager, bootstrap_iters=0, **options
    )
    results.pop("samples", None)  # lm-eval's command writes them to a file of their own
    return json.loads(json.dumps(results, default=handle_non_serializable))  # as lm-eval writes it


def values(results, task):
    return {m: results["results"][task][f"{m},none"] for m in METRICS}


@pytest.fixture(scope="module")
def tiny_lm(tiny_model_dir):
    return LongPPLLM(str(tiny_model_dir), dtype="float64", device="cpu", head_chunk=7, vocab_tile=64)


@pytest.fixture(scope="module")
def manager(tiny_artifact, tmp_path_factory):
    """The tiny artifact's task and no other (an empty keytokens folder)."""
    return task_manager([tiny_artifact], root=tmp_path_factory.mktemp("no-artifacts"))


def task_of(artifact: Path) -> str:
    return f"longppl_{artifact.name}"


def test_the_task_gives_the_numbers_of_make_score(tiny_lm, manager, tiny_artifact):
    results = evaluate(tiny_lm, [task_of(tiny_artifact)], manager)
    lm = tiny_lm.lm
    expected = api.score(lm.model, lm.tokenizer, tiny_artifact, head_chunk=7, vocab_tile=64).corpus
    got = values(results, task_of(tiny_artifact))
    assert got == {m: expected[ours] for m, ours in METRICS.items()}  # the same additions: equal
    assert all(v is not None for v in got.values())
    meta = results["configs"][task_of(tiny_artifact)]["metadata"]
    artifact = load_artifact(tiny_artifact)
    assert meta["longppl_fingerprint"] == artifact.manifest["fingerprint"]
    assert meta["longppl_artifact_record"]["name"] == tiny_artifact.name and meta["longppl_unavailable"] == {}
    assert results["higher_is_better"][task_of(tiny_artifact)] == dict.fromkeys(METRICS, False)
    assert results["config"]["longppl_settings"]["head_chunk"] == 7
    assert schema_problems(results) == []


def test_key_spans_report_longppl_soft_as_null_with_the_reason(
    tiny_lm,
    spans_artifact,
    tiny_artifact,
    tmp_path,
):
    manager = task_manager([spans_artifact, tiny_artifact], root=tmp_path)
    results = evaluate(tiny_lm, [task_of(spans_artifact), task_of(tiny_artifact)], manager)
    spans, full = values(results, task_of(spans_artifact)), values(results, task_of(tiny_artifact))
    assert spans["longppl_soft"] is None and full["longppl_soft"] is not None
    assert {k: v for k, v in spans.items() if k != "longppl_soft"} == {
        k: v for k, v in full.items() if k != "longppl_soft"
    }
    reason = results["configs"][task_of(spans_artifact)]["metadata"]["longppl_unavailable"]
    assert set(reason) == {"longppl_soft"} and "per-token LSD" in reason["longppl_soft"]
    assert schema_problems(results) == []
    broken = json.loads(json.dumps(results))
    broken["configs"][task_of(spans_artifact)]["metadata"]["longppl_unavailable"] = {}
    assert any("longppl_soft,none" in p for p in schema_problems(broken))  # null only with a reason


def test_the_limit_pooling_and_an_inline_task(tiny_lm, tiny_artifact, tmp_path):
    """An inline config (the Python way) and --limit: the first documents, pooled as `make score`
    pools them (``documents=N``)."""
    inline = {
        "task": "longppl_inline",
        "class": LongPPLTask,
        "metadata": {"longppl_artifact": str(tiny_artifact)},
    }
    results = evaluate(tiny_lm, [inline], task_manager(root=tmp_path), limit=2)
    lm = tiny_lm.lm
    expected = api.score(lm.model, lm.tokenizer, tiny_artifact, documents=2, head_chunk=7, vocab_tile=64)
    assert values(results, "longppl_inline") == {m: expected.corpus[ours] for m, ours in METRICS.items()}
    assert results["n-samples"]["longppl_inline"] == {"original": 3, "effective": 2}
    assert results["configs"]["longppl_inline"]["metadata"]["config_source"] == "inline"


def test_a_wrong_pin_another_model_and_a_missing_artifact_are_errors(tiny_artifact, tmp_path, tokenizer):
    pinned = {"task": "x", "class": LongPPLTask, "metadata": {"longppl_artifact": str(tiny_artifact),
              "longppl_fingerprint": "0" * 64}}  # fmt: skip
    with pytest.raises(PipelineError, match=r"fingerprint .* the task pins 000000000000"):
        LongPPLTask(pinned)
    with pytest.raises(PipelineError, match="no key-token artifact at"):
        task_manager([tmp_path / "missing"], root=tmp_path)
    with pytest.raises(PipelineError, match="could not download key-token dataset 'org/none'"):
        task_manager(["hf://datasets/org/none@main"], root=tmp_path)
    with pytest.raises(PipelineError, match=r"--model_args K=\.\.\.: no such option"):
        LongPPLLM("smollm2-135m", K=4)
    from lm_eval.models.huggingface import HFLM

    model = build_model("llama", len(tokenizer))
    hf = HFLM(pretrained=model, tokenizer=tokenizer, max_length=512, batch_size=1)
    task = {"task": "y", "class": LongPPLTask, "metadata": {"longppl_artifact": str(tiny_artifact)}}
    with pytest.raises(PipelineError, match="needs the per-token log-probs of --model longppl"):
        evaluate(hf, [task], task_manager(root=tmp_path), limit=1)


def test_every_compute_setting_reaches_the_model(spy, tiny_model_dir):
    """As for every command (tests/commands/test_compute_reaches.py): the loader and every scorer."""
    model = LongPPLLM(
        str(tiny_model_dir), device="cpu", dtype="float64", cache_dir=spy["cache_dir"], **COMPUTE
    )
    model.token_logprobs([Text("doc", "The committee reported the bill.")])
    check(spy)
    assert {k: model.get_model_info()["longppl_settings"][k] for k in ("head_chunk", "vocab_tile")} == {
        "head_chunk": 7,
        "vocab_tile": 123,
    }


def test_the_answer_is_a_float_that_carries_the_tokens_and_pickles(tiny_lm):
    import pickle

    (value,) = tiny_lm.token_logprobs([Text("doc", "The committee reported the bill.")])
    again = pickle.loads(pickle.dumps(value))  # --use_cache keeps answers in sqlite, pickled
    assert isinstance(again, float) and float(again) == float(value) == np.nansum(value.tokens.logprobs)
    assert np.array_equal(again.tokens.offsets, value.tokens.offsets) and str(value) == str(float(value))


def test_the_command_line_defaults_and_the_artifact_flag():
    from pipeline.lmeval.command_line import take_artifacts, with_defaults

    assert take_artifacts(["--tasks", "t", "--artifact", "a", "--artifact=b"]) == (
        ["a", "b"],
        ["--tasks", "t"],
    )
    assert with_defaults(["--tasks", "t"]) == ["--model", "longppl", "--device", "auto", "--tasks", "t"]
    assert with_defaults(["run", "-M", "hf", "--device=cpu"]) == ["run", "-M", "hf", "--device=cpu"]
    assert with_defaults(["ls", "tasks"]) == ["ls", "tasks"]
    assert with_defaults(["--config", "c.yaml"]) == ["--config", "c.yaml"]


# ----------------------------------------------------------------------------------------------
# Any perplexity task: wikitext's own preprocessing and metrics on a local file


WIKITEXT = """task: wikitext_local
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: loglikelihood_rolling
test_split: test
doc_to_text: ""
doc_to_target: !function lm_eval.tasks.wikitext.preprocess_wikitext.wikitext_detokenizer
process_results: !function lm_eval.tasks.wikitext.preprocess_wikitext.process_results
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
metadata:
  version: 2.0
"""
PAGES = [
    " = Federal powers = \n The committee reported the bill . The President uses powers in a crisis .\n",
    " = Registers = \n line 1 : REGISTER_CONTENT is 4512 . line 2 : REGISTER_CONTENT is 2290 .\n" * 3,
]


@pytest.fixture(scope="module")
def wikitext(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wikitext")
    (folder / "wiki.jsonl").write_text("".join(json.dumps({"page": p}) + "\n" for p in PAGES))
    (folder / "wikitext_local.yaml").write_text(WIKITEXT.format(data=folder / "wiki.jsonl"))
    return folder


def direct_loglikelihood(model, tokenizer, text: str) -> float:
    """The text's log-likelihood after BOS, one plain forward pass (full-vocabulary logits)."""
    ids = [tokenizer.bos_token_id, *tokenizer(text, add_special_tokens=False)["input_ids"]]
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].double()
    return float(torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None]).sum())


def test_wikitext_equals_hf_in_one_window_and_stays_exact_beyond(tiny_lm, wikitext, tmp_path):
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks.wikitext.preprocess_wikitext import wikitext_detokenizer

    lm = tiny_lm.lm
    manager = task_manager(include_path=wikitext, root=tmp_path)
    ours = evaluate(tiny_lm, ["wikitext_local"], manager)["results"]["wikitext_local"]
    n_tokens = max(len(lm.tokenizer(wikitext_detokenizer({"page": p}))["input_ids"]) for p in PAGES)
    runs = {}
    for window in (n_tokens, 16):  # one window; disjoint windows of 16 tokens
        hf = HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, max_length=window, batch_size=1)
        runs[window] = evaluate(hf, ["wikitext_local"], manager)["results"]["wikitext_local"]
    for metric in ("word_perplexity,none", "byte_perplexity,none", "bits_per_byte,none"):
        assert ours[metric] == pytest.approx(runs[n_tokens][metric], rel=1e-12)
        assert runs[16][metric] > ours[metric] * 1.01  # hf's windows lose context: another number
    texts = [wikitext_detokenizer({"page": p}) for p in PAGES]
    total = sum(direct_loglikelihood(lm.model, lm.tokenizer, t) for t in texts)
    n_bytes = sum(len(p.encode()) for p in PAGES)
    assert ours["bits_per_byte,none"] == pytest.approx(-total / n_bytes / math.log(2), rel=1e-12)


def test_a_text_longer_than_the_context_is_an_error_or_windows(tiny_model_dir, wikitext, tmp_path):
    manager = task_manager(include_path=wikitext, root=tmp_path)
    short = LongPPLLM(str(tiny_model_dir), dtype="float64", device="cpu")
    short.lm.model.config.max_position_embeddings = 40  # as if the model's context were 40 tokens
    with pytest.raises(PipelineError, match="more than its context of 40: pass context_limit=<tokens>"):
        evaluate(short, ["wikitext_local"], manager)
    windows = LongPPLLM(str(tiny_model_dir), dtype="float64", device="cpu", context_limit=32)
    windows.lm.model.config.max_position_embeddings = 40
    result = evaluate(windows, ["wikitext_local"], manager)
    assert result["config"]["longppl_model_name"].endswith("@ctx32")
    assert np.isfinite(result["results"]["wikitext_local"]["bits_per_byte,none"])


# ----------------------------------------------------------------------------------------------
# The command: lm-eval's flags, results files, samples, errors


def lm_eval_command(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.commands.lm_eval", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        env={**__import__("os").environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    )  # fmt: skip


def test_the_command_with_limit_log_samples_and_output_path(tiny_model_dir, tiny_artifact, tmp_path):
    task = task_of(tiny_artifact)
    done = lm_eval_command(
        "--model_args", f"pretrained={tiny_model_dir},dtype=float64,head_chunk=7", "--artifact",
        str(tiny_artifact), "--tasks", task, "--limit", "2", "--log_samples", "--output_path",
        str(tmp_path / "out"), "--batch_size", "4",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (folder,) = (tmp_path / "out").iterdir()  # <output_path>/<model name>/
    (results_file,) = folder.glob("results_*.json")
    stamp = results_file.stem.removeprefix("results_")
    (samples_file,) = folder.glob(f"samples_{task}_{stamp}.jsonl")
    results = json.loads(results_file.read_text())
    assert results["config"]["limit"] == 2 and results["n-samples"][task] == {"original": 3, "effective": 2}
    assert results["config"]["batch_size"] == "4" and results["config"]["device"] == "auto"
    assert schema_problems(results) == []
    samples = [json.loads(line) for line in samples_file.read_text().splitlines()]
    assert [s["doc_id"] for s in samples] == [0, 1]
    assert float(samples[0]["resps"][0][0]) == pytest.approx(-samples[0]["ppl"][0])  # the text's NLL
    for metric in ("ppl", "longppl"):  # the samples' items reproduce the corpus value
        nll, n = (sum(s[metric][i] for s in samples) for i in (0, 1))
        assert results["results"][task][f"{metric},none"] == pytest.approx(math.exp(nll / n), rel=1e-12)
    assert "|longppl" in done.stdout.replace(" ", "") or "longppl" in done.stdout
    assert read_lmeval_results(tmp_path / "out").skipped  # a --limit run is not a leaderboard entry


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--artifact", "/nowhere/art", "--tasks", "longppl_art"],
         "error: no key-token artifact at /nowhere/art"),
        (["--artifact", "hf://datasets/org/none@main", "--tasks", "longppl_none"],
         "error: could not download key-token dataset 'org/none'"),
        (["--artifact"], "error: --artifact needs a value"),
    ],
)  # fmt: skip
def test_command_errors_are_one_line(args, message):
    done = lm_eval_command(*args, timeout=600)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith(message) and "Traceback" not in done.stderr


def test_an_unknown_task_is_one_line(tiny_artifact):
    done = lm_eval_command("--artifact", str(tiny_artifact), "--tasks", "longppl_nosuch", timeout=600)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: longppl_nosuch: no such lm-eval task") and task_of(tiny_artifact) in last


# ----------------------------------------------------------------------------------------------
# Results files on the leaderboard


def write_results_file(model, tasks, manager, output_path: Path) -> Path:
    """An lm-eval results file as the command writes it (lm-eval's EvaluationTracker)."""
    from lm_eval.loggers import EvaluationTracker

    tracker = EvaluationTracker(output_path=str(output_path))
    results = lm_eval.simple_evaluate(
        model=model, tasks=tasks, task_manager=manager, evaluation_tracker=tracker, log_samples=False
    )
    tracker.save_results_aggregated(results=results, samples=None)
    (path,) = output_path.rglob("results_*.json")
    return path


def test_the_leaderboard_mixes_a_score_line_and_an_lm_eval_results_file(
    tiny_lm, manager, tiny_artifact, other_model_dir, tmp_path
):
    from pipeline.commands import leaderboard as leaderboard_command
    from pipeline.models.loading import load_model
    from pipeline.reporting import leaderboard

    other = load_model(str(other_model_dir), dtype="float64", device="cpu")
    scores = tmp_path / "results" / "scores.jsonl"
    api.score(other.model, other.tokenizer, tiny_artifact, results_file=scores, model_name="other-model")
    path = write_results_file(tiny_lm, [task_of(tiny_artifact)], manager, tmp_path / "results" / "lm-eval")
    cfg = compose_config("leaderboard", [f"results={scores}", f"out_dir={tmp_path / 'board'}"])
    board = leaderboard_command.run(cfg)["leaderboard.md"].read_text()
    rows = [line for line in board.splitlines() if line.startswith("| ") and "---" not in line][1:]
    names = {row.split("|")[2].strip() for row in rows}
    assert names == {"other-model", tiny_lm.model_name}
    ours = read_lmeval_results(path).frame.row(0, named=True)
    assert ours["longppl"] == json.loads(path.read_text())["results"][task_of(tiny_artifact)]["longppl,none"]
    assert ours["fingerprint"] == load_artifact(tiny_artifact).manifest["fingerprint"]
    assert f"| {ours['longppl']:.4f}" in board or leaderboard.fmt(ours["longppl"]) in board
    assert ours["n_tokens"] is None and ours["line"] is None and ours["date"] is not None


def test_the_reader_checks_what_it_reads(tmp_path):
    (tmp_path / "other.json").write_text('{"not": "lm-eval"}')
    assert read_lmeval_results(tmp_path).frame.is_empty()  # another JSON in a folder: passed over
    with pytest.raises(PipelineError, match="is not an lm-eval results file"):
        read_lmeval_results(tmp_path / "other.json")
    task = "longppl_x"
    metadata = {"longppl_fingerprint": "f" * 64, "longppl_artifact_record": {"name": "x"}}
    results = {
        "results": {task: {"ppl,none": 0.5, "longppl,none": 2.0}},
        "configs": {task: {"metadata": metadata}},
        "config": {"longppl_model_name": "m"},
        "n-samples": {task: {"original": 2, "effective": 2}},
    }  # fmt: skip
    (tmp_path / "bad.json").write_text(json.dumps(results))
    with pytest.raises(
        PipelineError, match=r"bad.json: task longppl_x: ppl is 0.5: a perplexity is at least 1"
    ):
        read_lmeval_results(tmp_path / "bad.json")
    with pytest.raises(PipelineError, match="no lm-eval results at"):
        read_lmeval_results(tmp_path / "missing")


# ----------------------------------------------------------------------------------------------
# Integration: the embedded models


@pytest.mark.integration
def test_the_documented_example_gives_the_numbers_and_the_result_id_of_make_score(tmp_path, monkeypatch):
    """The lm-eval page's Python example as written (docs/lm-eval.md, "The Python way": key tokens of a
    short GovReport text from the embedded Gemma, SmolLM2 through lm-eval), then `make score` on its
    artifact: the same numbers, the same result id, one leaderboard entry."""
    from pipeline.commands.score import run
    from pipeline.results.score import read_scores

    page = (ROOT / "docs" / "lm-eval.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", page.split("## The Python way", 1)[1], re.S)[1]
    namespace: dict = {}
    monkeypatch.chdir(ROOT)
    exec(compile(code, "docs/lm-eval.md", "exec"), namespace)  # the project's own documentation
    artifact, results = namespace["artifact"], namespace["results"]
    results.pop("samples", None)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results, default=handle_non_serializable))
    results = json.loads(path.read_text())
    scores = tmp_path / "scores.jsonl"
    line = run(compose_config("score", [f"artifact={artifact}", f"results={scores}", "progress=false"]))
    assert values(results, "longppl_mine") == {m: line["corpus"][ours] for m, ours in METRICS.items()}
    assert line["corpus"]["n_key_tokens"] > 0
    row = read_lmeval_results(path).frame.row(0, named=True)
    assert row["result_id"] == line["result_id"] and row["settings"] == read_scores(scores)["settings"][0]
    assert row["model_name"] == line["model_name"] == "smollm2-135m"
    assert schema_problems(results) == []
