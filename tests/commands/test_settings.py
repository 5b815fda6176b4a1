"""The settings types: defined once (the YAML defaults are theirs), parsed one way, and every command's
bad settings end in one ``error:`` line with status 2 (a type error included), never a traceback."""

from __future__ import annotations

import dataclasses
import json

import pytest
from omegaconf import OmegaConf

from pipeline.commands.shell import plain
from pipeline.definition import KeyTokenDefinition
from pipeline.errors import PipelineError
from pipeline.keytokens.executors import Engine
from pipeline.keytokens.selection import STAGE_COMPUTE
from pipeline.settings import Compute, ScoreSettings, parse
from tests.support import (
    ROOT,
    STAGE1_TEXTS,
    cli,
    compose_config,
    error_lines,
    job,
    keytokens_overrides,
    messages,
    one_error,
)


def test_yaml_defaults_are_the_types_defaults():
    compute = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "compute.yaml"))
    assert {k: compute[k] for k in dataclasses.asdict(Compute())} == dataclasses.asdict(Compute())
    stage = compose_config("keytokens", ["preset=paper"])
    assert stage.head_dtype == STAGE_COMPUTE.head_dtype
    paper = parse(KeyTokenDefinition, stage)
    assert dataclasses.replace(paper, short_window_bos=True) == KeyTokenDefinition()  # the paper's values
    assert parse(ScoreSettings, compose_config("score", [])) == ScoreSettings()
    assert parse(Engine, plain(compose_config("keytokens", []))) == Engine()


def test_parse_names_the_setting_and_the_problem():
    cases = [
        (KeyTokenDefinition, {"K": "abc"}, "setting K='abc': Input should be a valid integer"),
        (KeyTokenDefinition, {"gamma": 0}, "setting gamma=0: Input should be greater than 0"),
        (ScoreSettings, {"grid": [[1, float("inf")]]}, r"setting grid=\[\[1, inf\]\]: every alpha and beta"),
        (
            ScoreSettings,
            {"context_limit": 1},
            "setting context_limit=1: Input should be greater than or equal to 2",
        ),
        (
            Compute,
            {"head_dtype": "float8"},
            "setting head_dtype='float8': Input should be 'auto', 'model' or",
        ),
    ]
    for cls, values, message in cases:
        with pytest.raises(PipelineError, match=message):
            parse(cls, values)
    assert parse(ScoreSettings, {"grid": "paper"}).grid == ScoreSettings().grid
    with pytest.raises(PipelineError, match=r"setting corpus\.txt_field: no such setting \(known: name, "):
        from pipeline.text.corpus import CorpusSpec

        CorpusSpec.parse({"name": "x", "path": "a.jsonl", "txt_field": "body"})


def bad_settings(module: str, tmp_path, *args: str) -> set[str]:
    """The error messages of a multirun of ``module`` over bad settings (each job fails)."""
    done = cli(module, "--multirun", *args, f"hydra.sweep.dir={tmp_path / 'sweep'}")
    lines = error_lines(done.stderr)
    return {line.split("] ", 1)[1] for line in lines}


def test_score_bad_settings(tiny_artifact, other_model_dir, tmp_path):
    base = ["model=local", f"model.spec={other_model_dir}", f"artifact={tiny_artifact}", "device=cpu"]
    messages = bad_settings(
        "pipeline.commands.score", tmp_path, *base, "context_limit=1,abc,null", "+model.revsion=x"
    )
    assert len(messages) == 1 and next(iter(messages)).startswith("setting model.revsion: no such setting")
    messages = bad_settings(
        "pipeline.commands.score", tmp_path, *base, "context_limit=1,abc", "head_dtype=model"
    )
    assert messages == {
        "setting context_limit=1: Input should be greater than or equal to 2",
        "setting context_limit='abc': Input should be a valid integer, unable to parse string as an integer",
    }


def test_keytokens_bad_settings(tiny_model_dir, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "a", "text": "some text"}\n')
    base = [
        o for o in keytokens_overrides(tiny_model_dir, corpus, tmp_path / "out") if not o.startswith("K=")
    ]
    messages = bad_settings("pipeline.commands.keytokens", tmp_path, *base, "K=abc,16", "dtype=float64,fp8")
    assert messages == {
        "setting K='abc': Input should be a valid integer, unable to parse string as an integer",
        "setting dtype='fp8': Input should be 'auto', 'float32', 'float64', 'bfloat16' or 'float16'",
        # the one good job gets past its settings and fails on the text (8 tokens, K=16)
        "no document of corpus 'local' can be scored: [{'doc_id': 'a', 'reason': '8 tokens: no token "
        "has a short context (K=16)'}]",
    }
    typo = bad_settings("pipeline.commands.keytokens", tmp_path, *base, "K=16", "+corpus.txt_field=body")
    assert len(typo) == 1 and next(iter(typo)).startswith("setting corpus.txt_field: no such setting")
    assert not (tmp_path / "out" / "test").exists()  # no artifact, not even a started one


def test_forgetting_bad_settings(tmp_path):
    out = [f"results={tmp_path / 'f.jsonl'}", f"plot_dir={tmp_path}"]
    messages = bad_settings("pipeline.commands.forgetting_curve", tmp_path, "n=0,abc", *out)
    assert messages == {
        "setting n=0: Input should be greater than 0",
        "setting n='abc': Input should be a valid integer, unable to parse string as an integer",
    }


def test_finetune_bad_settings(other_model_dir, tmp_path):
    base = ["model=local", f"model.spec={other_model_dir}", f"output_dir={tmp_path}"]
    messages = bad_settings(
        "pipeline.commands.finetune", tmp_path, *base, "source=teacher,self", "max_length=abc"
    )
    assert messages == {
        "setting source='teacher': Input should be 'self', 'artifact' or 'ce'",
        "setting max_length='abc': Input should be a valid integer, unable to parse string as an integer",
    }


def test_validate_and_demo_bad_settings(tmp_path):
    validate = bad_settings("studies.validate", tmp_path / "v", "documents=0,x")
    assert validate == {
        "setting documents=0: Input should be greater than 0",
        "setting documents='x': Input should be a valid integer, unable to parse string as an integer",
    }
    demo = bad_settings("studies.longce_demo", tmp_path / "d", "learning_rate=-1,abc")
    assert demo == {
        "setting learning_rate=-1: Input should be greater than 0",
        "setting learning_rate='abc': Input should be a valid number, unable to parse string as a number",
    }


def test_import_official_bad_settings(tmp_path):
    messages = bad_settings(
        "pipeline.commands.import_official", tmp_path, "min_boundary_share=2,x", f"output_dir={tmp_path}"
    )
    assert messages == {
        "setting min_boundary_share=2: Input should be less than or equal to 1",
        "setting min_boundary_share='x': Input should be a valid number, unable to parse string as a number",
    }


def test_reports_bad_settings(tiny_artifact, tmp_path):
    board = bad_settings("pipeline.commands.leaderboard", tmp_path / "l", "results=[1],{a: 1}")
    assert board == {
        "setting results=[1]: Input should be a valid string",
        "setting results={'a': 1}: Input should be a valid string",
    }
    refresh = bad_settings(
        "pipeline.commands.leaderboard_refresh", tmp_path / "r", "tolerance=0,0.1", "aggregate=mean"
    )
    assert refresh == {
        "setting tolerance=0: Input should be greater than 0",
        "setting aggregate='mean': Input should be 'pooled', 'official' or 'official_before_a7082c3'",
    }
    show = bad_settings("pipeline.commands.show", tmp_path / "s", f"artifact={tiny_artifact}", "all=maybe")
    assert show == {"setting all='maybe': Input should be a valid boolean, unable to interpret input"}
    publish = bad_settings("pipeline.commands.publish", tmp_path / "p", "repo=a/b", "dry_run=maybe")
    assert publish == {"setting dry_run='maybe': Input should be a valid boolean, unable to interpret input"}


def test_unknown_top_level_keys_are_refused(tmp_path):
    done = cli(
        "pipeline.commands.leaderboard", "--multirun", "+artefact=x,y", f"hydra.sweep.dir={tmp_path / 's'}"
    )
    assert set(messages(done.stderr).values()) == {
        "setting +artefact: this command has no setting artefact, so nothing would read it (known: "
        "artifact, benchmarks, default_artifact, forgetting_results, ladder_results, lmeval_results, "
        "out_dir, results)"
    }


def test_forgetting_token_ids_beyond_the_vocabulary(tiny_model_dir, tmp_path):
    done = cli(
        "pipeline.commands.forgetting_curve",
        "--multirun", "model=local", f"model.spec={tiny_model_dir}", "bos_id=99999,0",
        "eos_id=99999", f"results={tmp_path / 'f.jsonl'}", f"plot_dir={tmp_path}", "device=cpu",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )  # fmt: skip
    rows = len(load_tokenizer_rows(tiny_model_dir))
    assert set(messages(done.stderr).values()) == {
        f"setting {name}=99999: not a token id of '{tiny_model_dir}', whose vocabulary has {rows} ids: "
        f"give an id below {rows}, or null for the model's own"
        for name in ("bos_id", "eos_id")
    }


def load_tokenizer_rows(model_dir) -> range:
    return range(json.loads((model_dir / "config.json").read_text())["vocab_size"])


def test_finetune_that_would_train_plain_ce_and_names_outside_the_output(
    tiny_model_dir, write_corpus, tmp_path
):
    corpus = write_corpus([{"id": "a", "text": STAGE1_TEXTS[0]}])
    done = cli(
        "pipeline.commands.finetune",
        "--multirun", "model=local", f"model.spec={tiny_model_dir}", "corpus=local",
        f"corpus.path={corpus}", f"output_dir={tmp_path / 'out'}", "K=16", "d=16", "max_length=32",
        "name=../../escaped,run", "device=cpu", "training.max_steps=1", f"hydra.sweep.dir={tmp_path / 's'}",
    )  # fmt: skip
    found = messages(done.stderr)
    assert job(found, "name=../../escaped").startswith(
        "setting name='../../escaped': String should match pattern"
    )
    assert job(found, "name=run") == (
        "source=self with K=16, d=16 and max_length=32: no token of a sequence of at most 32 tokens lies "
        "past K + d = 32, so every weight would be 1 and LongCE would be plain CE: lower K or d "
        "(K + d < 32), raise max_length, or pass source=ce"
    )
    assert not (tmp_path / "out").exists() and not (tmp_path.parent / "escaped").exists()
    official = cli(
        "pipeline.commands.import_official", "--multirun", "name=../../escaped,ok", "+official.tokeniser=x",
        f"hydra.sweep.dir={tmp_path / 'logs'}",
    )  # fmt: skip
    found = messages(official.stderr)
    assert job(found, "name=../../escaped").startswith(
        "setting name='../../escaped': String should match pattern"
    )
    assert job(found, "name=ok") == (
        "setting official.tokeniser: no such setting (known: folder, evaluator, tokenizer, "
        "tokenizer_revision)"
    )


def test_validate_family_members_with_unknown_keys(tiny_model_dir, tmp_path):
    spec = str(tiny_model_dir)
    done = cli(
        "studies.validate", "--multirun",
        f"checkpoints=[{{spec: '{spec}', contextlimit: 5}}],[{{spec: '{spec}', context_limit: abc}}]",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )  # fmt: skip
    assert {line.split("]] ", 1)[1] for line in error_lines(done.stderr)} == {
        f"family member {{'spec': '{spec}', 'contextlimit': 5}}: no setting contextlimit (known: model, "
        "spec, context_limit, label)",
        f"family member {{'spec': '{spec}', 'context_limit': 'abc'}}: context_limit is a number of tokens "
        "(at least 2)",
    }


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
