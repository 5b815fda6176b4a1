"""LooGLE's tasks in lm-evaluation-harness: one engine, two shells. With the model ``longppl`` a task
gives the numbers of `make loogle` on the same model, questions and settings."""

from __future__ import annotations

import pytest

lm_eval = pytest.importorskip("lm_eval", reason="lm-eval is not installed: make setup-lmeval")

from pipeline.errors import PipelineError  # noqa: E402
from pipeline.lmeval import LongPPLLM, task_manager  # noqa: E402
from pipeline.loogle.data.bounds import jsonl_rows  # noqa: E402
from pipeline.loogle.data.reading import DataSource, load_questions  # noqa: E402
from pipeline.loogle.generation.decoding import cut_prompt, generate  # noqa: E402
from tests.support import compose_config  # noqa: E402


def test_the_task_gives_the_numbers_of_make_loogle(tiny_model_dir, tmp_path):
    from pipeline.commands.loogle import run as loogle

    overrides = ["model=local", f"model.spec={tiny_model_dir}", "task=longdep_qa", "limit=2", "device=cpu",
                 "dtype=float64", "max_new_tokens=20", "progress=false", f"predictions_dir={tmp_path}",
                 f"results={tmp_path / 'r.jsonl'}"]  # fmt: skip
    ours = loogle(compose_config("loogle", overrides))["longdep_qa"]["metrics"]
    lm = LongPPLLM(str(tiny_model_dir), dtype="float64", device="cpu")
    manager = task_manager(root=tmp_path / "none")
    results = lm_eval.simple_evaluate(
        model=lm, tasks=["loogle_longdep_qa"], task_manager=manager, limit=2, gen_kwargs="max_gen_toks=20",
        bootstrap_iters=0, log_samples=True,
    )  # fmt: skip
    theirs = results["results"]["loogle_longdep_qa"]
    for metric in ("bleu1", "bleu4", "rouge1", "rouge2", "rougeL", "meteor"):
        assert theirs[f"{metric},none"] == pytest.approx(ours[metric], abs=1e-12), metric
    # the very answers of make loogle: the same prompts, cut and generation
    (path,) = tmp_path.glob("*longdep_qa*.jsonl")
    answers = [sample["resps"][0][0] for sample in results["samples"]["loogle_longdep_qa"]]
    assert answers == [row["prediction"] for row in jsonl_rows(path)] and all(answers)
    # and one question at a time, as LooGLE's loop decodes (the document's questions were decoded together)
    questions = load_questions("longdep_qa", DataSource())[:2]
    budget = 512 - 20  # the tiny model's context less the new tokens
    alone = [
        generate(lm.lm.model, lm.lm.tokenizer, cut_prompt(lm.lm.tokenizer, q, budget), 20) for q in questions
    ]
    assert answers == alone
    assert results["configs"]["loogle_longdep_qa"]["metadata"]["loogle_data"] == "sample"


@pytest.mark.parametrize("key", ["loogle_max_length", "loogle_batch_size"])
@pytest.mark.parametrize("route", ["metadata", "gen_kwargs"])
def test_a_prompt_budget_or_batch_that_is_no_number_is_refused_before_the_model_runs(
    tiny_model_dir, tmp_path, monkeypatch, route, key
):
    """``loogle_max_length`` or ``loogle_batch_size`` "abc" (lm-eval's --metadata, or --gen_kwargs after
    the task is built) gave a traceback from the first request, after the model loaded; it is one error
    before any request runs."""
    lm = LongPPLLM(str(tiny_model_dir), dtype="float64", device="cpu")
    monkeypatch.setattr(type(lm), "generate_until", lambda *args, **kwargs: pytest.fail("the model ran"))
    given = {"metadata": {key: "abc"}} if route == "metadata" else {}
    manager = task_manager(root=tmp_path / "none", **given)
    gen_kwargs = f"{key}=abc" if route == "gen_kwargs" else None
    with pytest.raises(PipelineError, match=rf"^setting {key}='abc': "):
        lm_eval.simple_evaluate(
            model=lm, tasks=["loogle_longdep_qa"], task_manager=manager, limit=1, gen_kwargs=gen_kwargs,
            bootstrap_iters=0,
        )  # fmt: skip


PROTOCOL = r"follows LooGLE's protocol .* only with --model longppl, not --model {}, .*--model longppl"


@pytest.mark.parametrize(
    "args, model",
    [
        (["--model", "hf", "--tasks", "loogle_shortdep_qa"], "hf"),
        (["run", "-M", "vllm", "--tasks", "arc_easy,loogle"], "vllm"),
        (["--model=hf", "--tasks=loogle_*"], "hf"),
        (["--tasks", "loogle_longdep_qa", "--model", "longppl", "--model", "hf"], "hf"),
    ],
)
def test_lm_evals_own_models_are_refused_a_loogle_task_before_they_load(monkeypatch, args, model):
    """`--model hf --tasks loogle_shortdep_qa` kept the prompt's last tokens, dropped LooGLE's
    instruction and ended in transformers' ValueError about loogle_batch_size: one line naming
    --model longppl, before lm-eval runs (so before any model loads)."""
    import lm_eval.__main__

    from pipeline.lmeval.command_line import check_loogle_model, run

    monkeypatch.setattr(lm_eval.__main__, "cli_evaluate", lambda: pytest.fail("lm-eval ran"))
    with pytest.raises(PipelineError, match=PROTOCOL.format(model)):
        run(args)
    check_loogle_model(["--tasks", "loogle_shortdep_qa"])  # the default model, longppl
    check_loogle_model(["--model", "hf", "--tasks", "arc_easy"])  # no LooGLE task
    check_loogle_model(["validate", "--tasks", "loogle_shortdep_qa"])  # no model runs


def test_a_config_files_model_is_refused_a_loogle_task_before_it_loads(tmp_path, monkeypatch):
    import lm_eval.__main__

    from pipeline.lmeval.command_line import run

    config = tmp_path / "run.yaml"
    config.write_text("model: hf\nmodel_args: {pretrained: x}\ntasks: [loogle_longdep_qa]\n")
    monkeypatch.setattr(lm_eval.__main__, "cli_evaluate", lambda: pytest.fail("lm-eval ran"))
    with pytest.raises(PipelineError, match=PROTOCOL.format("hf")):
        run(["run", "--config", str(config)])
    config.write_text("tasks: [loogle_longdep_qa]\n")  # lm-eval's default model, hf
    with pytest.raises(PipelineError, match=PROTOCOL.format("hf")):
        run(["run", "--config", str(config)])


def test_lm_evals_hf_model_in_python_stops_before_it_generates(tiny_model_dir, tmp_path, monkeypatch):
    """lm_eval.simple_evaluate with lm-eval's own HFLM on a LooGLE task: refused in one line when
    the model first reads a request's options, before it truncates or generates anything."""
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=str(tiny_model_dir), device="cpu", dtype="float32")
    monkeypatch.setattr(type(lm), "_model_generate", lambda *a, **k: pytest.fail("the model generated"))
    manager = task_manager(root=tmp_path / "none")
    run = dict(model=lm, tasks=["loogle_longdep_qa"], task_manager=manager, limit=1, bootstrap_iters=0)
    with pytest.raises(PipelineError, match=PROTOCOL.format("hf, vllm or another of lm-eval's own")):
        lm_eval.simple_evaluate(**run)
    from pipeline.lmeval.command_line import tasks_need_longppl_model

    with tasks_need_longppl_model(), pytest.raises(PipelineError, match=PROTOCOL.format("HFLM")):
        lm_eval.simple_evaluate(**run)  # `make lm-eval`: refused before any request reaches the model
