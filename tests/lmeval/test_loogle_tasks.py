"""LooGLE's tasks in lm-evaluation-harness: one engine, two shells. With the model ``longppl`` a task
gives the numbers of `make loogle` on the same model, questions and settings."""

from __future__ import annotations

import pytest

lm_eval = pytest.importorskip("lm_eval", reason="lm-eval is not installed: make setup-lmeval")

from pipeline.errors import PipelineError  # noqa: E402
from pipeline.lmeval import LongPPLLM, task_manager  # noqa: E402
from pipeline.loogle.data.questions import jsonl_rows  # noqa: E402
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
