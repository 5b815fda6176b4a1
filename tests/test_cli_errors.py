"""Every bad input of issue #14 through the command-line entry points, as a user meets it: one
``error:`` line per failure, exit status 2, never a traceback. Each command runs once, as a Hydra
multirun over its bad inputs (a failing job does not stop the others), so the suite stays short."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from tests.conftest import ROOT, keytokens_overrides
from tests.test_artifact_checks import CASES, craft


def cli(module: str, *args: str, check_rc: int | None = 2) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    if check_rc is not None:
        assert done.returncode == check_rc, done.stderr[-3000:]
    return done


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: [")]


def test_score_on_every_damaged_artifact(tiny_artifact, other_model_dir, tmp_path):
    roots = {case: craft(tiny_artifact, tmp_path / case, **edits) for case, (edits, _) in CASES.items()}
    done = cli(
        "pipeline.score",
        "--multirun",
        "model=local",
        f"model.spec={other_model_dir}",
        "artifact=" + ",".join(str(r) for r in roots.values()),
        f"results={tmp_path / 'scores.jsonl'}",
        "device=cpu",
        "progress=false",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    lines = error_lines(done.stderr)
    assert len(lines) == len(CASES)
    for case, (_, message) in CASES.items():
        line = next(line for line in lines if f"artifact={roots[case]}," in line)
        assert re.search(message, line), (case, line)
    assert not (tmp_path / "scores.jsonl").exists()  # no number was produced
    assert any(line.startswith("error: multirun job failed [artifact=") for line in done.stderr.splitlines())


def test_keytokens_settings_are_checked_before_any_model_loads(tiny_model_dir, tmp_path):
    """Every job has one bad setting (the first in field order is reported); the evaluator is a
    path that does not exist, so a job that got past the settings would fail differently."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "a", "text": "some text"}) + "\n")
    base = keytokens_overrides(tmp_path / "no-model", corpus, tmp_path / "out")
    sweep = ["K=0,16", "d=-1,8", "alpha=nan,0.5", "beta=inf,-30", "gamma=0,5", "num_documents=0"]
    keep = [o for o in base if o.split("=")[0] not in {s.split("=")[0] for s in sweep}]
    done = cli("pipeline.keytokens", "--multirun", *keep, *sweep, f"hydra.sweep.dir={tmp_path / 'sweep'}")
    messages = {line.split("] ", 1)[1] for line in error_lines(done.stderr)}
    assert messages == {
        "setting K=0: Input should be greater than 0",
        "setting d=-1: Input should be greater than 0",
        "setting alpha=nan: Input should be a finite number",
        "setting beta=inf: Input should be a finite number",
        "setting gamma=0: Input should be greater than 0",
        "setting num_documents=0: Input should be greater than 0",
    }
    assert not (tmp_path / "out").exists()


def test_keytokens_corpus_that_cannot_be_scored(tiny_model_dir, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    base = [o for o in keytokens_overrides(tiny_model_dir, "x", tmp_path / "out") if "corpus.path" not in o]
    done = cli(
        "pipeline.keytokens",
        "--multirun",
        *base,
        f"corpus.path={tmp_path},{empty}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    messages = sorted(line.split("] ", 1)[1] for line in error_lines(done.stderr))
    assert messages == [
        "corpus 'local' has no documents: nothing to score",
        f"corpus.path={tmp_path} is a directory: pass a .jsonl or .parquet file",
    ]


def result_line(**corpus) -> str:
    values = {"ppl": 12.0, "longppl": 6.0, "longppl_soft": 11.0, "n_tokens": 100, "n_key_tokens": 5, **corpus}
    row = {
        "model_name": "m",
        "artifact": {"name": "a", "fingerprint": "f" * 64},
        "corpus": values,
        "date": "2026-11-22T00:00:00+00:00",
    }
    return json.dumps(row)  # allow_nan: the file is made by hand here


def test_leaderboard_rejects_values_out_of_range(tmp_path):
    bad = {
        "huge": (
            result_line(n_tokens=10**30),
            r"`corpus\.n_tokens` is 1000000000000000000000000000000: a count",
        ),
        "nan": (result_line(ppl=float("nan")), r"`corpus\.ppl` is nan, not a finite number"),
        "negative": (result_line(longppl=-4.0), r"`corpus\.longppl` is -4\.0: a perplexity is at least 1"),
        "infinite": (result_line(longppl_soft=float("inf")), r"`corpus\.longppl_soft` is inf, not a finite"),
        "coverage": (result_line(key_char_coverage=1.5), r"`corpus\.key_char_coverage` is 1\.5: a fraction"),
    }
    paths = []
    for name, (line, _) in bad.items():
        paths.append(tmp_path / f"{name}.jsonl")
        paths[-1].write_text(line + "\n")
    done = cli(
        "pipeline.reporting.leaderboard",
        "--multirun",
        "results=" + ",".join(str(p) for p in paths),
        f"out_dir={tmp_path / 'out'}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    lines = error_lines(done.stderr)
    for name, (_, message) in bad.items():
        line = next(line for line in lines if f"{name}.jsonl" in line)
        assert re.search(r"line 1 is not a valid result \(" + message, line), line
    assert not (tmp_path / "out").exists()


def test_publish_and_show_on_hostile_names(tiny_artifact, tmp_path):
    done = cli(
        "pipeline.reporting.publish",
        "--multirun",
        f"artifact={tiny_artifact}",
        "repo='org/na`me','org/a b',org",
        "dry_run=true",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    lines = error_lines(done.stderr)
    assert len(lines) == 3 and all("is not a Hub dataset id" in line for line in lines)
    missing = cli(
        "pipeline.reporting.keytoken_page",
        f"artifact={tiny_artifact}",
        "doc_id=nope",
        f"hydra.run.dir={tmp_path / 'logs'}",
    )
    assert missing.stderr.startswith("error: no document 'nope'") and missing.stderr.count("\n") == 1
