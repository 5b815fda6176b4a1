"""The context ladder on tiny models: every rung equals `make score ... context_limit=W` to every digit;
the effective length and its bootstrap on made-up sums; bad input; the results line and leaderboard."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest

from pipeline.errors import PipelineError
from pipeline.ladder.effective import LadderSums, effective_length, within
from pipeline.results import ladder as ladder_results
from tests.support import build_tokenizer, compose_config, ladder, save_tiny_model, score

# ----------------------------------------------------------------------------------------------
# Exactness: each rung is the score stage at that context limit


@pytest.mark.parametrize("extra", [[], ["add_bos=false", "window_batch_tokens=40"]])
def test_every_rung_equals_make_score_at_its_context_limit(other_model_dir, tiny_artifact, tmp_path, extra):
    row = ladder(other_model_dir, tiny_artifact, tmp_path, *extra)
    limits = [r["context_limit"] for r in row["rungs"]]
    assert limits == [8, 16, 32, 64, 128, None]  # K=16: from K/2, below the longest document (BOS counted)
    for rung in row["rungs"]:
        limit = "null" if rung["context_limit"] is None else rung["context_limit"]
        scored = score(other_model_dir, tiny_artifact, tmp_path, f"context_limit={limit}", *extra)
        assert rung["corpus"] == scored["corpus"]  # every metric, every digit
        assert rung["documents"] == scored["documents"]
        settings = {k: v for k, v in scored["settings"].items() if k != "context_limit"}
        assert {k: row["settings"][k] for k in settings} == settings
        if rung["context_limit"] is None:
            assert row["model"] == scored["model"] and row["artifact"] == scored["artifact"]
            assert row["model_name"] == scored["model_name"]
    assert row["rungs"][-1]["corpus"]["ppl"] != row["rungs"][0]["corpus"]["ppl"]  # the rungs differ


def test_key_sums_and_limited_tokens(other_model_dir, tiny_artifact, tmp_path):
    row = ladder(other_model_dir, tiny_artifact, tmp_path, "ladder=[8,32,500]")
    for rung in row["rungs"]:
        for nll, doc in zip(rung["key_nll"], rung["documents"], strict=True):
            if doc["n_key_tokens"]:
                assert math.exp(nll / doc["n_key_tokens"]) == pytest.approx(doc["longppl"], rel=1e-12)
    for rung in row["rungs"]:
        assert sum(rung["key_limited"]) == rung["n_key_limited"]
    redone = effective_length(LadderSums.of_row(row), 0.05, bootstrap=200, seed=0, confidence=0.95)
    assert redone["effective"] == row["effective"]  # the line alone redoes the bootstrap
    big = row["rungs"][2]  # longer than every document: the full pass itself, limits nothing
    assert big["copied_documents"] == 3 and big["n_key_limited"] == 0 and not big["informative"]
    assert big["corpus"] == row["rungs"][-1]["corpus"]
    assert row["rungs"][0]["n_key_limited"] == row["rungs"][-1]["corpus"]["n_key_tokens"] > 0


def test_key_spans_artifact(spans_artifact, other_model_dir, tmp_path):
    """Key spans alone: PPL and LongPPL per rung, LongPPL-soft null with the reason, as `make score`."""
    row = ladder(other_model_dir, spans_artifact, tmp_path, "ladder=[32]")
    scored = score(other_model_dir, spans_artifact, tmp_path, "context_limit=32")
    assert row["rungs"][0]["corpus"] == scored["corpus"] and scored["corpus"]["longppl_soft"] is None
    assert "longppl_soft" in row["rungs"][-1]["corpus"]["unavailable"]


# ----------------------------------------------------------------------------------------------
# The effective length on made-up sums


def sums(means: list[list[float]], n: list[int], limited: list[list[int]] | None = None) -> LadderSums:
    means_, n_ = np.array(means, dtype=float), np.array(n, dtype=float)
    lim = np.array(limited) if limited is not None else np.repeat(n_[:, None], means_.shape[1], 1).astype(int)
    lim[:, -1] = 0
    rungs = (*[2 ** (9 + r) for r in range(means_.shape[1] - 1)], None)
    return LadderSums(rungs, means_ * n_[:, None], n_, lim)


def test_within_stays_within():
    informative = np.array([[True, True, True, True, False]])
    delta = np.array([[3.0, 0.01, 0.2, 0.01, 0.0]])  # dips in at 1024, out again at 2048
    assert within(delta, informative, math.log(1.05))[0] == 3
    assert within(np.array([[3.0, 2.0, 1.0, 0.5, 0.0]]), informative, 0.1)[0] == 4  # none: full
    assert within(np.zeros((1, 5)), informative, 0.1)[0] == 0


def test_effective_length_and_interval():
    # document 0 needs 2048, the others 1024: pooled, 1024 is within 5% only without document 0
    means = [[3.0, 3.0, 1.0, 1.0], [3.0, 1.0, 1.0, 1.0], [3.0, 1.0, 1.0, 1.0], [3.0, 1.02, 1.0, 1.0]]
    result = effective_length(sums(means, [10, 10, 10, 10]), 0.05, bootstrap=500, seed=0, confidence=0.95)
    e = result["effective"]
    assert e["length"] == 2048 and e["censored"] is None
    assert e["interval"] == [1024, 2048]  # resamples without document 0 give 1024
    assert e["shares"][1] == pytest.approx(np.mean(np.random.default_rng(0).multinomial(
        4, [0.25] * 4, size=500)[:, 0] == 0))  # fmt: skip
    by = {r["tolerance"]: r["length"] for r in e["by_tolerance"]}
    assert by[0.25] == 2048 and by[0.01] == 2048
    delta = result["rungs"][1]["delta"]
    assert delta == pytest.approx(math.log(np.exp(np.mean([3.0, 1.0, 1.0, 1.02]))) - 1.0)
    again = effective_length(sums(means, [10, 10, 10, 10]), 0.05, bootstrap=500, seed=0, confidence=0.95)
    assert again == result  # the seed fixes the resamples


def test_censoring_and_uninformative_rungs():
    right = effective_length(sums([[3.0, 2.0, 1.0]], [5]), 0.05, bootstrap=50, seed=0, confidence=0.95)
    assert right["effective"]["length"] is None and right["effective"]["censored"] == "right"
    assert ladder_results.reading_text(right["effective"]) == (">1024", "[>1024, >1024]")
    left = effective_length(sums([[1.0, 1.0, 1.0]], [5]), 0.05, bootstrap=50, seed=0, confidence=0.95)
    assert ladder_results.reading_text(left["effective"])[0] == "<=512"
    # rung 1024 limits no key token: it equals full context and says nothing, so 512 failing is >512
    dead = sums([[3.0, 1.0, 1.0]], [5], limited=[[5, 0, 0]])
    reading = effective_length(dead, 0.05, bootstrap=50, seed=0, confidence=0.95)
    assert ladder_results.reading_text(reading["effective"])[0] == ">512"
    none = effective_length(sums([[3.0, 1.0]], [0]), 0.05, bootstrap=50, seed=0, confidence=0.95)
    assert none["effective"]["undefined"] == "no key tokens"


# ----------------------------------------------------------------------------------------------
# Bad input: one-line errors


def test_rung_longer_than_the_model(tiny_artifact, tmp_path):
    short = save_tiny_model(tmp_path / "short", build_tokenizer(300), "llama", max_positions=512)
    message = r"^ladder rung 1024 exceeds .*context of 512 tokens \(with the BOS\): use rungs of at most 511"
    with pytest.raises(PipelineError, match=message):
        ladder(short, tiny_artifact, tmp_path, "ladder=[64,1024]")
    tiny = save_tiny_model(tmp_path / "tiny", build_tokenizer(300), "llama", max_positions=64)
    with pytest.raises(
        PipelineError,
        match=r"^document 'doc-0' has .* more than its context of 64: the ladder's full-context rung",
    ):
        ladder(tiny, tiny_artifact, tmp_path, "ladder=[16]")


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("ladder=[]", "setting ladder=[]: Tuple should have at least 1 item after validation, not 0"),
        ("tolerance=0", "setting tolerance=0: Input should be greater than 0"),
        ("tolerance=-0.1", "setting tolerance=-0.1: Input should be greater than 0"),
        ("ladder=[64,64]", "setting ladder=[64, 64]: every rung must be a different context limit"),
        ("ladder=[1]", "setting ladder=1: Input should be greater than or equal to 2"),
    ],
)
def test_bad_settings(other_model_dir, tiny_artifact, tmp_path, setting, message):
    with pytest.raises(PipelineError, match=f"^{message.replace('[', '.').replace(']', '.')}$"):
        ladder(other_model_dir, tiny_artifact, tmp_path, setting)


def test_results_line_is_validated(other_model_dir, tiny_artifact, tmp_path):
    row = ladder(other_model_dir, tiny_artifact, tmp_path, "ladder=[16,64]")
    path = tmp_path / "ladder.jsonl"
    assert ladder_results.read_rows(path) == [json.loads(path.read_text())]
    broken = {**row, "rungs": row["rungs"][::-1]}
    with pytest.raises(ValueError, match="ascending context limits, then full context"):
        ladder_results.append(tmp_path / "bad.jsonl", broken)


def test_cli_errors_are_one_line(tiny_artifact, tmp_path):
    """Through the command line: each bad input is one ``error:`` line, exit status 2."""
    from tests.support import cli, error_lines

    short = save_tiny_model(tmp_path / "short", build_tokenizer(300), "llama", max_positions=512)
    done = cli(
        "pipeline.commands.ladder",
        "--multirun", "model=local", f"model.spec={short}", f"artifact={tiny_artifact}",
        "device=cpu", "progress=false", f"results={tmp_path / 'ladder.jsonl'}", f"plot_dir={tmp_path}",
        "ladder=[],[64,4096]", "tolerance=0,0.05", f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )  # fmt: skip
    messages = {line.split("] ", 1)[1] for line in error_lines(done.stderr)}
    assert messages == {
        "setting ladder=[]: Tuple should have at least 1 item after validation, not 0",
        "setting tolerance=0: Input should be greater than 0",
        f"ladder rung 4096 exceeds {short}'s context of 512 tokens (with the BOS): use rungs of at most 511"
        " tokens",
    }
    assert not (tmp_path / "ladder.jsonl").exists()


# ----------------------------------------------------------------------------------------------
# The picture and the leaderboard


def png_height(data: bytes) -> int:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[20:24], "big")


def test_picture_alone_and_with_the_forgetting_curve(other_model_dir, tiny_artifact, tmp_path):
    from pathlib import Path

    from pipeline.reporting.ladder import ladder_png

    row = ladder(other_model_dir, tiny_artifact, tmp_path, "ladder=[16,64]", "documents=2")
    assert row["rungs"][-1]["corpus"]["n_documents"] == 2 and row["settings"]["documents"] == 2
    written = Path(row["plot"]).read_bytes()
    assert written == ladder_png(row) and png_height(written) == 500  # byte-identical, one panel
    memory = {"fine": 0, "coarse": 40, "fine_censored": False, "coarse_censored": False}
    memory |= {"largest_measured": 60, "fine_threshold": 0.99, "coarse_margin": 0.01}
    points = [{"length": n, "beyond_context": False, "error": None, "copy_mean": 0.5, "copy_std": 0.1,
               "lm_mean": 0.3, "lm_std": 0.1, "input_tokens": 2 * n + 3} for n in (20, 40, 60)]  # fmt: skip
    settings = {"context": 512, "grid": "linear", "n": 3, "R": 1, "seed": 0, "dtype": "float64"}
    curve = {
        "model_name": row["model_name"],
        "memory": memory,
        "points": points,
        "text": {"source": "corpus"},
    }
    curve["settings"] = settings
    both = ladder_png(row, curve)
    assert png_height(both) == 1000 and both == ladder_png(row, curve)


def test_leaderboard_shows_the_effective_length(other_model_dir, tiny_model_dir, tiny_artifact, tmp_path):
    import csv

    from pipeline.reporting import leaderboard
    from pipeline.results.score import read_scores

    score(other_model_dir, tiny_artifact, tmp_path)
    score(other_model_dir, tiny_artifact, tmp_path, "context_limit=16")
    score(tiny_model_dir, tiny_artifact, tmp_path)
    row = ladder(other_model_dir, tiny_artifact, tmp_path, "ladder=[16,64]")
    scores = tmp_path / "scores.jsonl"
    paths = leaderboard.render(read_scores(scores), tmp_path / "out", ladder=tmp_path / "ladder.jsonl")
    md = paths["leaderboard.md"].read_text()
    text, interval = ladder_results.reading_text(row["effective"])
    assert "| effective length | interval |" in md and f"| {text} | {interval} |" in md
    assert "Effective length: the shortest context limit" in md
    rows = {r["model"]: r for r in csv.DictReader(paths["leaderboard.csv"].open())}
    entry = rows[row["model_name"]]
    assert entry["ladder_result_id"] == row["result_id"] and entry["effective_tolerance"] == "0.05"
    assert entry["effective_length_censored"] == (row["effective"]["censored"] or "")
    (limited,) = [r for r in rows.values() if r["context_limit"] == "16"]
    assert limited["effective_length"] == ""  # a context-limited entry: none
    assert png_height(paths["ladder.png"].read_bytes()) == 500
    forged = tmp_path / "forged.jsonl"  # the same ladder recorded on other tables: not this board's
    identity = json.loads(json.dumps(row["artifact"]["identity"]))
    next(iter(identity["documents"].values()))["keys"] = "0" * 32  # other key spans
    forged.write_text(json.dumps(row | {"artifact": row["artifact"] | {"identity": identity}}) + "\n")
    other = leaderboard.render(read_scores(scores), tmp_path / "other", ladder=forged)
    assert "effective length" not in other["leaderboard.md"].read_text()
    plain = leaderboard.render(read_scores(scores), tmp_path / "out")  # no ladder file: no column, no plot
    assert "effective length" not in plain["leaderboard.md"].read_text()
    assert not (tmp_path / "out" / "ladder.png").exists()


def test_yaml_defaults_are_the_types_defaults():
    from pipeline.ladder.rungs import LadderSettings
    from pipeline.settings import ScoreSettings, parse

    cfg = compose_config("ladder", [])
    assert parse(LadderSettings, cfg) == LadderSettings()
    assert parse(ScoreSettings, cfg) == ScoreSettings()


@pytest.mark.integration
def test_embedded_smollm2_rungs_equal_make_score(write_corpus, tmp_path):
    """SmolLM2 against a short SmolLM2 artifact: every rung is the score call of `make score
    MODEL=smollm2-135m ... context_limit=W` to every digit (one model load for both)."""
    from pipeline.artifact.reader import open_artifact
    from pipeline.jobs.ladder import ladder_line
    from pipeline.ladder.rungs import LadderSettings
    from pipeline.ladder.rungs import run_ladder as ladder_passes
    from pipeline.models.loading import ModelChoice
    from pipeline.score.engine import score as score_call
    from pipeline.settings import Compute, ScoreSettings
    from tests.support import ROOT, compose_keytokens, run_keytokens

    sample = json.loads((ROOT / "data" / "govreport-sample.jsonl").read_text().splitlines()[0])
    corpus = write_corpus([{"id": sample["id"], "text": sample["text"][:1500]}])
    stage1 = [
        f"corpus.path={corpus}",
        f"output_dir={tmp_path}",
        "name=smol",
        "K=32",
        "d=32",
        "max_tokens=192",
    ]
    run_keytokens(compose_keytokens(["corpus=local", "evaluator=smollm2-135m", *stage1, "progress=false"]))
    artifact, compute = open_artifact(str(tmp_path / "smol")), Compute(device="cpu")
    lm = ModelChoice(spec="smollm2-135m").load(compute)
    settings = LadderSettings(ladder=(16, 64), bootstrap=100)
    passes = ladder_passes(artifact, lm, settings, ScoreSettings(), compute)
    row = ladder_line(passes, settings, "smollm2-135m", lm, time.time())
    assert [r["context_limit"] for r in row["rungs"]] == [16, 64, None]
    assert row["rungs"][0]["n_key_limited"] == row["rungs"][0]["corpus"]["n_key_tokens"] > 0
    for rung in row["rungs"]:
        scored = score_call(artifact, lm, ScoreSettings(context_limit=rung["context_limit"]), compute)
        assert rung["corpus"] == scored.corpus and rung["documents"] == scored.documents
