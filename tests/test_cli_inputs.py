"""Inputs that once ended in a traceback, a wait or a silent wrong run, through the command-line entry
points as a user meets them: one ``error:`` line per failure, exit status 2, no traceback. Each command
runs once, as a Hydra multirun over its bad inputs where it can (a failing job does not stop the
others), so the suite stays short."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import struct
import subprocess
import sys

from pipeline.artifact.reader import load_artifact
from tests.conftest import ROOT, STAGE1_TEXTS
from tests.test_cli_errors import cli, error_lines


def messages(stderr: str) -> dict[frozenset[str], str]:
    """Each multirun job's error message by its overrides (Hydra's ``a=1,b=2``, as a set)."""
    jobs = (line.removeprefix("error: [").split("] ", 1) for line in error_lines(stderr))
    return {frozenset(overrides.split(",")): message for overrides, message in jobs}


def job(found: dict[frozenset[str], str], *overrides: str) -> str:
    """The message of the one job that has all these overrides."""
    (message,) = [m for job, m in found.items() if job >= set(overrides)]
    return message


class RunsCode:
    """A pickle that would create a directory when unpickled without weights_only."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def model_folders(tiny_model_dir, tmp_path) -> dict[str, str]:
    """Model specs that cannot load, by case."""
    fake, header = tmp_path / "fake.gguf", tmp_path / "header.gguf"
    fake.write_text("not a model\n")
    header.write_bytes(struct.pack("<4sIQQ", b"GGUF", 3, 2**64 - 1, 2**64 - 1))  # counts no file holds
    no_tokenizer, pickled = tmp_path / "no-tokenizer", tmp_path / "pickled"
    no_tokenizer.mkdir()
    shutil.copy(tiny_model_dir / "config.json", no_tokenizer)
    shutil.copy(tiny_model_dir / "model.safetensors", no_tokenizer)
    shutil.copytree(tiny_model_dir, pickled, ignore=shutil.ignore_patterns("*.safetensors"))
    with open(pickled / "pytorch_model.bin", "wb") as handle:
        pickle.dump({"w": RunsCode(str(tmp_path / "code-ran"))}, handle)
    specs = {"fake": fake, "header": header, "no_tokenizer": no_tokenizer, "pickled": pickled}
    return {case: str(path) for case, path in specs.items()} | {"typo": "smollm2-13m", "hub": "org/name"}


def test_models_that_cannot_load(tiny_model_dir, tiny_artifact, tmp_path):
    specs = model_folders(tiny_model_dir, tmp_path)
    done = cli(
        "pipeline.commands.score", "--multirun", "model=local", "model.spec=" + ",".join(specs.values()),
        "device=cpu,tpu", f"artifact={tiny_artifact}", f"results={tmp_path / 's.jsonl'}", "progress=false",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )  # fmt: skip
    found = messages(done.stderr)
    assert len(found) == 2 * len(specs)
    by_case = {case: job(found, "device=cpu", f"model.spec={spec}") for case, spec in specs.items()}
    assert {job(found, "device=tpu", f"model.spec={spec}") for spec in specs.values()} == {
        "setting device='tpu': not a device: use auto, cpu, cuda or cuda:<index>"
    }
    assert by_case["fake"] == (
        f"{specs['fake']} is not a GGUF file (it does not start with the bytes 'GGUF'): pass a .gguf model "
        "file, a checkpoint directory or a Hub id"
    )
    assert "its GGUF header claims 18446744073709551615 tensors" in by_case["header"]
    assert by_case["no_tokenizer"].startswith(f"{specs['no_tokenizer']} has no tokenizer (no tokenizer.json")
    assert "a pickled checkpoint (.bin) that holds more than tensors, refused" in by_case["pickled"]
    assert not (tmp_path / "code-ran").exists()
    assert by_case["typo"] == (
        "unknown model 'smollm2-13m': not a local path, not an embedded model (gemma3-270m, smollm2-135m; "
        "did you mean smollm2-135m?), and not loadable from the Hugging Face Hub (HF_HUB_OFFLINE=1 is set "
        "and it is not in the local Hub cache)"
    )
    assert by_case["hub"].startswith(
        "could not load 'org/name' from the Hugging Face Hub (HF_HUB_OFFLINE=1 is set and it is not in the "
        "local Hub cache): on a machine with network access run `hf download org/name --local-dir DIR`"
    )
    assert not (tmp_path / "s.jsonl").exists()


# The score command, timed from the end of its imports (torch and transformers take seconds, more on
# a busy machine) to its exit: the part a Hub check could spend waiting.
AFTER_IMPORTS = """
import sys, time
from pipeline.commands.score import main
started = time.monotonic()
sys.argv = ["pipeline.commands.score", *sys.argv[1:]]
try:
    main()
finally:
    print(f"seconds after imports: {time.monotonic() - started:.2f}", file=sys.stderr)
"""


def test_a_hub_model_out_of_reach_fails_at_once(tmp_path):
    """A mistyped model name and a Hub id, offline (HF_HUB_OFFLINE=1) and with the Hub unreachable
    (an endpoint that refuses connections): one error line each, well within 10 s of the imports
    (it was 47 s of download retries and 46 warning lines)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env |= {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    for offline in ("1", "0"):
        done = subprocess.run(
            [sys.executable, "-c", AFTER_IMPORTS, "--multirun", "model.spec=smollm2-13m,org/name",
             f"hydra.sweep.dir={tmp_path / offline}"],
            cwd=ROOT, env={**env, "HF_HUB_OFFLINE": offline}, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 2 and "Traceback" not in done.stderr and "Retry" not in done.stderr
        found = messages(done.stderr)
        why = "HF_HUB_OFFLINE=1 is set" if offline == "1" else "the Hub could not be reached ("
        assert len(found) == 2 and all(why in message for message in found.values()), found
        seconds = float(done.stderr.rsplit("seconds after imports: ", 1)[1])
        assert seconds < 10, seconds  # both models


def test_results_files_with_bad_bytes(tmp_path):
    utf8, torn = tmp_path / "utf8.jsonl", tmp_path / "torn.jsonl"
    utf8.write_bytes(b'{"model_name": "m\xff"}\n')
    torn.write_bytes(b'{"model_name": "m", "corpus": {"ppl"')  # a write cut short
    done = cli(
        "pipeline.commands.leaderboard", "--multirun", f"results={utf8},{torn}", f"out_dir={tmp_path / 'o'}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )  # fmt: skip
    found = messages(done.stderr)
    assert job(found, f"results={utf8}") == (
        f"{utf8} line 1 is not a valid result (not UTF-8: byte 0xff at column 18): fix or delete that line"
    )
    assert job(found, f"results={torn}").startswith(f"no scores in {torn} (its only line, 1, was cut short)")


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


def test_refresh_checks_the_record_before_scoring(tiny_artifact, tmp_path):
    """The record lacks a metric; the pinned model does not exist, so scoring would fail otherwise."""
    artifact = load_artifact(tiny_artifact)
    pins = {"fingerprint": artifact.manifest["fingerprint"], "contents": artifact.contents}
    record = {"model_name": "tiny", "artifact": {"name": "a", **pins}, "corpus": {"ppl": 2.0}}
    pins["discrete"] = artifact.identity.discrete
    recorded = tmp_path / "recorded.jsonl"
    recorded.write_text(json.dumps(record) + "\n")
    done = cli(
        "pipeline.commands.leaderboard_refresh",
        f"artifact={tiny_artifact}",
        *(f"{k}={v}" for k, v in pins.items()),
        f"recorded={recorded}",
        f"models=[{{name: tiny, spec: '{tmp_path / 'missing'}'}}]", f"work_dir={tmp_path / 'work'}",
        f"hydra.run.dir={tmp_path / 'logs'}",
    )  # fmt: skip
    assert done.stderr.splitlines() == [
        f"error: the recorded result of tiny in {recorded} lacks corpus.longppl, which aggregate=pooled "
        "compares: record it again with record=true"
    ]
    assert not (tmp_path / "work").exists()


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


def test_no_key_token_is_said_and_explained(tiny_model_dir, other_model_dir, write_corpus, tmp_path, capsys):
    """beta=5: LCL is a log-probability (at most 0), so no token can be key; the run goes on (the soft
    weights and the grid still hold) and both summaries say why LongPPL is n/a."""
    from pipeline.commands.score import run as run_score
    from tests.conftest import compose_config, compose_keytokens, keytokens_overrides, run_keytokens

    corpus = write_corpus([{"id": f"d{i}", "text": t} for i, t in enumerate(STAGE1_TEXTS)])
    run_keytokens(compose_keytokens(keytokens_overrides(tiny_model_dir, corpus, tmp_path, "beta=5")))
    reason = "beta=5 admits none, since LCL is a log-probability, at most 0 (the paper's beta is -2)"
    assert f"note        no key token: {reason}" in capsys.readouterr().out
    row = run_score(compose_config("score", [
        "model=local", f"model.spec={other_model_dir}", f"artifact={tmp_path / 'test'}",
        f"results={tmp_path / 's.jsonl'}", "device=cpu", "progress=false",
    ]))  # fmt: skip
    assert row["corpus"]["n_key_tokens"] == 0 and row["corpus"]["longppl"] is None
    assert f"no key token: the artifact's {reason}" in capsys.readouterr().out


def test_validate_family_members_with_unknown_keys(tiny_model_dir, tmp_path):
    spec = str(tiny_model_dir)
    done = cli(
        "pipeline.commands.validate", "--multirun",
        f"checkpoints=[{{spec: '{spec}', contextlimit: 5}}],[{{spec: '{spec}', context_limit: abc}}]",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )  # fmt: skip
    assert {line.split("]] ", 1)[1] for line in error_lines(done.stderr)} == {
        f"family member {{'spec': '{spec}', 'contextlimit': 5}}: no setting contextlimit (known: model, "
        "spec, context_limit, label)",
        f"family member {{'spec': '{spec}', 'context_limit': 'abc'}}: context_limit is a number of tokens "
        "(at least 2)",
    }
