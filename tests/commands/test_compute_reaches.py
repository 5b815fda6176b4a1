"""Every compute setting reaches every command that runs a model, and the Python API: the loader
gets the dtype, device and GGUF cache, every scorer the head blocks, window batches and head dtype.
The settings are unusual values (head_chunk=7, vocab_tile=123, window_batch_tokens=321,
head_dtype=float32) so that a command that builds a scorer or loads a model its own way fails here."""

from __future__ import annotations

import json

from pipeline.models import loading
from tests.support import COMPUTE, compose_config, keytokens_overrides, run_keytokens
from tests.support import check_compute_reached as check


def overrides(spy: dict) -> list[str]:
    return [f"{k}={v}" for k, v in COMPUTE.items()] + [f"cache_dir={spy['cache_dir']}", "dtype=float64"]


def test_keytokens(spy, tiny_model_dir, write_corpus, tmp_path):
    from tests.support import STAGE1_TEXTS

    corpus = write_corpus([{"id": "a", "text": STAGE1_TEXTS[0]}])
    cfg_overrides = [
        o for o in keytokens_overrides(tiny_model_dir, corpus, tmp_path) if "head_chunk" not in o
    ]
    run_keytokens(compose_config("keytokens", cfg_overrides + overrides(spy)))
    check(spy)


def test_score(spy, tiny_artifact, other_model_dir, tmp_path):
    from pipeline.commands.score import run

    base = ["model=local", f"model.spec={other_model_dir}", f"artifact={tiny_artifact}", "device=cpu"]
    row = run(
        compose_config("score", [*base, f"results={tmp_path / 's.jsonl'}", "progress=false", *overrides(spy)])
    )
    check(spy)
    assert {k: row["settings"][k] for k in ("head_chunk", "vocab_tile", "window_batch_tokens")} == {
        "head_chunk": 7,
        "vocab_tile": 123,
        "window_batch_tokens": 321,
    }


def test_ladder(spy, tiny_artifact, other_model_dir, tmp_path):
    from pipeline.commands.ladder import run

    base = ["model=local", f"model.spec={other_model_dir}", f"artifact={tiny_artifact}", "device=cpu"]
    out = [f"results={tmp_path / 'l.jsonl'}", f"plot_dir={tmp_path}", "progress=false", "ladder=[16]"]
    row = run(compose_config("ladder", [*base, *out, "bootstrap=10", *overrides(spy)]))
    check(spy)
    assert [row["settings"][k] for k in ("head_chunk", "vocab_tile", "window_batch_tokens")] == [7, 123, 321]


def test_forgetting_curve(spy, tiny_model_dir, write_corpus, tmp_path):
    from pipeline.commands.forgetting_curve import run
    from pipeline.commands.shell import FORGETTING_CONF, compose

    corpus = write_corpus([{"id": "a", "text": "The committee reported the bill. " * 40}])
    base = ["model=local", f"model.spec={tiny_model_dir}", "corpus=local", f"corpus.path={corpus}"]
    base += [f"results={tmp_path / 'f.jsonl'}", f"plot_dir={tmp_path}", "device=cpu", "progress=false"]
    run(
        compose(
            "forgetting",
            [*base, "grid=linear", "n=1", "R=1", "max_length=8", *overrides(spy)],
            FORGETTING_CONF,
        )
    )
    check(spy)


def test_finetune(spy, other_model_dir, write_corpus, tmp_path):
    from pipeline.commands.finetune import run
    from tests.support import STAGE1_TEXTS

    corpus = write_corpus([{"id": "a", "text": STAGE1_TEXTS[0]}])
    base = ["model=local", f"model.spec={other_model_dir}", "corpus=local", f"corpus.path={corpus}"]
    base += [f"output_dir={tmp_path}", "K=16", "d=8", "max_length=60", "device=cpu", "training.max_steps=1"]
    base += ["training.save_strategy=no", "training.disable_tqdm=true", "training.warmup_steps=0"]
    run(compose_config("finetune", [*base, *overrides(spy)]))
    check(spy)


def test_validate(
    spy,
    tiny_artifact,
    tiny_model_dir,
    other_model_dir,
    tokenizer,
    tmp_path,
    whole_loogle_artifact,
):
    from studies.validate import run
    from tests.support import save_tiny_model, validate_config

    part1 = save_tiny_model(tmp_path / "part1", tokenizer, max_positions=2048)
    cfg = validate_config(
        tmp_path,
        f"govreport={tiny_artifact}",
        f"evaluators=[{{artifact: '{tiny_artifact}'}}]",
        "govreport_documents=1",
        f"members=[{{spec: '{other_model_dir}', context_limit: 32, label: other-32}}]",
        "evaluator=local",
        f"evaluator.spec='{part1}'",
        *["documents=1", "lines=8", "questions=2", "min_gap_lines=3", "K=16", "d=16"],
        f"loogle.artifact='{whole_loogle_artifact}'",
        *overrides(spy),
    )
    run(cfg)
    check(spy, loads=3)


def test_longce_demo(spy, tiny_artifact, other_model_dir, tmp_path):
    from studies import longce_demo

    cfg = compose_config(
        "longce_demo",
        [
            "model=local",
            f"model.spec={other_model_dir}",
            f"govreport={tiny_artifact}",
            *[
                "train_documents=1",
                "eval_documents=1",
                "lines=6",
                "questions=2",
                "min_gap_lines=2",
                "K=16",
                "d=16",
                "steps=1",
            ],
            "govreport_documents=1",
            f"work_dir={tmp_path / 'work'}",
            f"docs_dir={tmp_path / 'docs'}",
            f"report={tmp_path / 'longce.md'}",
            "device=cpu",
            "progress=false",
            *overrides(spy),
        ],
    )
    longce_demo.run(cfg)
    check(spy, loads=3)


def test_refresh_passes_its_settings_to_the_score_stage(tmp_path):
    from pipeline.settings import parse
    from pipeline.sharing.refresh import Refresh, score_command

    refresh = parse(
        Refresh,
        compose_config("leaderboard_refresh", ["+settings.head_dtype=float32", "+settings.head_chunk=7"]),
    )
    command = score_command(refresh, ["refresh-0"], tmp_path, tmp_path / "s.jsonl")
    assert 'head_dtype="float32"' in command and "head_chunk=7" in command


def test_python_api(spy, tiny_artifact, tiny_model_dir, other_model_dir):
    from pipeline.api import find_key_tokens, score
    from pipeline.api.callback import LongPPLCallback

    lm = loading.load_model(str(other_model_dir), dtype="float64", device="cpu")
    spy["loads"].clear()
    score(lm.model, lm.tokenizer, tiny_artifact, documents=1, **COMPUTE)
    evaluator = loading.load_model(str(tiny_model_dir), dtype="float64", device="cpu")
    spy["loads"].clear()
    find_key_tokens(["word " * 40], evaluator.model, evaluator.tokenizer, K=16, d=8, **COMPUTE)
    callback = LongPPLCallback(tiny_artifact, documents=1, **COMPUTE)
    state = type("State", (), {"is_world_process_zero": True, "global_step": 1, "log_history": []})()
    callback.on_evaluate(None, state, None, model=lm.model, processing_class=lm.tokenizer, metrics={})
    assert json.dumps(callback.history[0]["eval_ppl"])  # it scored
    for scorer in spy["scorers"]:
        assert (scorer.head_chunk, scorer.vocab_tile, scorer.window_batch_tokens) == (7, 123, 321)
    assert set(spy["head_dtypes"]) == {"float32"}
