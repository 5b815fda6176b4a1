"""The forgetting curve on tiny random-weight models: exact accuracies, determinism, bad input,
results file, plot and leaderboard columns."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from pipeline.commands import leaderboard as leaderboard_command
from pipeline.commands.forgetting_curve import main as forgetting_main
from pipeline.commands.forgetting_curve import run as forgetting_run
from pipeline.errors import PipelineError
from pipeline.forgetting import curve
from pipeline.forgetting.samples import build_input, draw_samples, grid_lengths, special_tokens
from pipeline.models.logprobs import TargetScorer
from pipeline.reporting import leaderboard
from pipeline.reporting.forgetting import forgetting_png
from pipeline.results import forgetting as forgetting_results
from pipeline.results.score import read_scores
from tests.support import build_model, build_tokenizer, compose_forgetting, save_tiny_model
from tests.support import run_forgetting as run

VOCAB = 400


def greedy_tokens(model, n: int, seed: int = 0) -> np.ndarray:
    """A token stream the model mostly predicts (greedy, every 4th token random): accuracies land
    strictly between 0 and 1, so a misaligned position would change them."""
    rng = np.random.default_rng(seed)
    ids = [int(rng.integers(2, VOCAB))]
    with torch.inference_mode():
        for i in range(n - 1):
            if i % 4 == 3:
                ids.append(int(rng.integers(2, VOCAB)))
            else:
                window = torch.tensor([ids[-8:]])
                ids.append(int(model(input_ids=window).logits[0, -1].argmax()))
    return np.array(ids, dtype=np.int64)


def direct_accuracy(model, ids: list[int], length: int) -> float:
    """Full logits of the whole input, argmax, over the last ceil(L/2) tokens of the second S."""
    with torch.inference_mode():
        predicted = model(input_ids=torch.tensor([ids])).logits[0].argmax(-1).tolist()
    end = 2 * length + 2
    scored = range(end - (length + 1) // 2, end)
    return sum(predicted[t - 1] == ids[t] for t in scored) / len(scored)


def settings(**changes) -> curve.CurveSettings:
    values = dict(
        source="corpus",
        grid="linear",
        n=3,
        R=3,
        max_length=37,
        min_length=3,
        seed=0,
        context=512,
        beyond_context=False,
        bos_token_id=0,
        eos_token_id=1,
        head_chunk=4,
        vocab_tile=64,
    )
    return curve.CurveSettings(**{**values, **changes})


@pytest.fixture(scope="module")
def tiny():
    model = build_model("llama", VOCAB)
    return model, TargetScorer(model, head_chunk=4, vocab_tile=64), greedy_tokens(model, 150)


@pytest.mark.parametrize("grid, max_length, R", [("linear", 37, 3), ("log", 45, 2)])
def test_accuracies_equal_a_direct_computation(tiny, grid, max_length, R):
    model, scorer, tokens = tiny
    s = settings(grid=grid, max_length=max_length, R=R)
    points = curve.measure_curve(scorer, s, tokens, progress=False)
    lengths = [p["length"] for p in points]
    assert lengths == grid_lengths(grid, 3, max_length, 3) and any(x % 2 for x in lengths)
    values = []
    for p in points:
        L = p["length"]
        irrelevant = tokens[-L:].tolist()
        for r, start in enumerate(p["starts"]):
            assert 0 <= start <= len(tokens) - 3 * L
            target = tokens[start : start + L].tolist()
            copy = direct_accuracy(model, [0, *target, 0, *target, 1], L)
            lm = direct_accuracy(model, [0, *irrelevant, 0, *target, 1], L)
            assert p["copy_accs"][r] == copy and p["lm_accs"][r] == lm
            values += [copy, lm]
        assert p["copy_mean"] == np.mean(p["copy_accs"]) and p["lm_std"] == np.std(p["lm_accs"])
        expected_p = stats.ttest_rel(p["copy_accs"], p["lm_accs"]).pvalue
        assert p["p_value"] == (1.0 if p["copy_accs"] == p["lm_accs"] else pytest.approx(expected_p))
    assert any(0 < v < 1 for v in values)  # the test can fail: hits and misses both occur


def test_random_tokens_source(tiny):
    model, scorer, _ = tiny
    ordinary = np.arange(2, VOCAB)
    s = settings(source="random", n=2, R=2, max_length=9)
    points = curve.measure_curve(scorer, s, ordinary, progress=False)
    for p in points:
        samples = draw_samples(ordinary, p["length"], 2, 0, "random")
        for r, sample in enumerate(samples):
            assert sample.start is None and set(sample.target) <= set(ordinary.tolist())
            ids = build_input(sample.irrelevant, sample.target, 0, 1).tolist()
            assert p["lm_accs"][r] == direct_accuracy(model, ids, p["length"])


def test_grids_and_samples():
    assert grid_lengths("linear", 4, 10) == [2, 5, 7, 10]
    # the reference's np.geomspace(8, 4094, 10, dtype=int), which truncates (not 8, 16, 32, ..., 1024)
    assert grid_lengths("log", 10, 4094, 8) == [8, 15, 31, 63, 127, 255, 511, 1023, 2047, 4094]
    for n, high in ((32, 20000), (32, 16000), (10, 8192), (7, 100)):
        assert grid_lengths("log", n, high, 8) == np.unique(np.geomspace(8, high, num=n, dtype=int)).tolist()
    assert grid_lengths("log", 1, 100) == [100] and grid_lengths("linear", 5, 3) == [1, 2, 3]
    source = np.arange(1000)
    a, b = draw_samples(source, 50, 4, 0, "corpus"), draw_samples(source, 50, 4, 0, "corpus")
    assert [x.start for x in a] == [x.start for x in b]
    assert [x.start for x in a] != [x.start for x in draw_samples(source, 50, 4, 1, "corpus")]
    assert all((x.irrelevant == source[-50:]).all() for x in a)


def test_memory_lengths():
    def point(length, copy, lm):
        return {"length": length, "copy_mean": copy, "lm_mean": lm, "error": None}

    points = [point(8, 1.0, 0.3), point(16, 0.995, 0.4), point(32, 0.9, 0.51), point(64, 0.5, 0.49)]
    points.append(point(128, 0.3, 0.3))
    memory = curve.memory_lengths(points)
    assert (memory["fine"], memory["coarse"]) == (16, 64)  # 0.50 - 0.49 is exactly 1 point
    assert not memory["fine_censored"] and not memory["coarse_censored"]
    censored = curve.memory_lengths([point(8, 0.98, 0.2), point(16, 0.9, 0.2)])
    assert censored["fine"] == 0 and censored["coarse"] == 16 and censored["coarse_censored"]
    failed = curve.memory_lengths([point(8, 1.0, 0.2), {"length": 16, "error": "boom"}])
    assert failed["fine"] == 8 and failed["fine_censored"] and failed["largest_measured"] == 8


# ----------------------------------------------------------------------------------------------
# The command on a saved tiny model and a text corpus


def test_run_writes_row_and_plot_and_is_deterministic(tiny_model_dir, corpus, tmp_path):
    first = run(tiny_model_dir, corpus, tmp_path / "a")
    second = run(tiny_model_dir, corpus, tmp_path / "b")
    other = run(tiny_model_dir, corpus, tmp_path / "c", "seed=1")
    numbers = json.dumps([first["points"], first["memory"]], sort_keys=True)
    assert numbers == json.dumps([second["points"], second["memory"]], sort_keys=True)
    assert [p["starts"] for p in first["points"]] != [p["starts"] for p in other["points"]]
    assert first["result_id"] == second["result_id"] != other["result_id"]
    (row,) = forgetting_results.read_rows(tmp_path / "a" / "forgetting.jsonl")
    assert row == first and row["model"]["bos_from"] == "tokenizer" and row["complete"]
    assert row["settings"]["context"] == 512 and row["settings"]["preset"] == "cpu"
    assert row["text"]["n_documents"] == 4 and len(row["text"]["documents_sha256"]) == 64
    assert row["libraries"]["torch"] and row["model"]["weights_sha256"]
    png = Path(row["plot"]).read_bytes()
    assert png.startswith(b"\x89PNG") and png == forgetting_png(row)


def test_beyond_context_is_an_error_or_marked(tiny_model_dir, corpus, tmp_path):
    with pytest.raises(PipelineError, match=r"L=300 makes inputs of 603 tokens, beyond .*512 tokens.*is 254"):
        run(tiny_model_dir, corpus, tmp_path, "max_length=300", "n=1")
    row = run(tiny_model_dir, corpus, tmp_path, "max_length=300", "n=2", "R=1", "beyond_context=true")
    assert [p["beyond_context"] for p in row["points"]] == [False, True]


def test_a_failing_length_is_recorded_and_the_curve_goes_on(tiny_model_dir, corpus, tmp_path, monkeypatch):
    measure = curve.input_accuracy

    def fails_at_10(scorer, ids, length):
        if length == 10:
            raise RuntimeError("out of memory (simulated)")
        return measure(scorer, ids, length)

    monkeypatch.setattr(curve, "input_accuracy", fails_at_10)
    with pytest.raises(PipelineError, match=r"1 of 2 lengths failed \(first: L=10, RuntimeError: out of mem"):
        run(tiny_model_dir, corpus, tmp_path)
    (row,) = forgetting_results.read_rows(tmp_path / "forgetting.jsonl")
    assert [p["error"] is None for p in row["points"]] == [False, True] and not row["complete"]
    assert row["points"][1]["length"] == 21 and row["memory"]["largest_measured"] == 21


def test_corpus_shorter_than_the_largest_length(tiny_model_dir, write_corpus, tmp_path):
    short = write_corpus([{"id": "a", "text": "The committee reported the bill. " * 4}])
    with pytest.raises(PipelineError, match=r"corpus 'local' .* has \d+ tokens, too few for .* L=200"):
        run(tiny_model_dir, short, tmp_path, "max_length=200", "n=1")


def test_model_without_bos(tmp_path, corpus):
    no_bos = build_tokenizer()
    no_bos.bos_token = None
    model_dir = save_tiny_model(tmp_path / "no-bos", no_bos)
    row = run(model_dir, corpus, tmp_path, "n=1")
    eos = no_bos.eos_token_id
    assert row["model"]["bos_token_id"] == eos and row["model"]["bos_from"] == "eos (the model has no BOS)"
    no_bos.eos_token = None
    with pytest.raises(PipelineError, match=r"neither a BOS nor an EOS.*bos_id="):
        special_tokens(no_bos, None, None)
    assert special_tokens(no_bos, 5, None)["bos_token_id"] == 5


def test_presets_and_bad_settings(tiny_model_dir, corpus, tmp_path):
    cpu, paper = compose_forgetting([]), compose_forgetting(["preset=paper", "R=4"])
    assert (cpu.grid, cpu.n, cpu.R, cpu.max_length, cpu.max_input) == ("log", 10, 3, "fit", 8192)
    paper_grid = (paper.grid, paper.n, paper.R, paper.max_length, paper.beyond_context)
    assert paper_grid == ("linear", 32, 4, "context", True)
    assert "K" not in cpu and "K" not in paper  # stage 1's conf/preset/ is not involved
    for bad, message in [
        ("R=0", "setting R=0: Input should be greater than 0"),
        ("grid=cubic", "grid='cubic'"),
    ]:
        with pytest.raises(PipelineError, match=message):
            run(tiny_model_dir, corpus, tmp_path, bad)


def test_the_long_preset_reaches_128k_inputs_where_the_model_allows():
    """preset=long: the reference's log grid up to the largest L whose input fits min(context, 131072)."""
    from pipeline.forgetting.samples import grid_lengths, input_tokens, resolve_max_length

    long = compose_forgetting(["preset=long"])
    assert (long.grid, long.n, long.max_length, long.max_input, long.beyond_context) == (
        "log",
        14,
        "fit",
        131072,
        False,
    )
    for context, top in ((131072, 65534), (1048576, 65534), (32768, 16382)):
        lengths = grid_lengths(long.grid, long.n, resolve_max_length("fit", context, long.max_input, True), 8)
        assert (lengths[0], lengths[-1], len(lengths)) == (8, top, 14)
        assert input_tokens(lengths[-1], True) <= min(context, 131072) < input_tokens(lengths[-1] + 1, True)
    assert grid_lengths("log", 14, 65534, 8)[:4] == [8, 15, 31, 63]  # doubling, as the reference's grid


def command(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """``python -m pipeline.commands.forgetting_curve ARGS`` in this process: (exit status, stderr)."""
    monkeypatch.setattr(sys, "argv", ["pipeline.commands.forgetting_curve", *args])
    with pytest.raises(SystemExit) as exited:
        forgetting_main()
    return exited.value.code, capsys.readouterr().err


def test_command_line_errors(monkeypatch, capsys, tmp_path):
    """What users meet through `make forgetting-curve`: one line, exit status 2."""
    logs = f"hydra.run.dir={tmp_path / 'logs'}"
    status, err = command(monkeypatch, capsys, logs, "n=0")
    assert status == 2 and err == "error: setting n=0: Input should be greater than 0\n"
    status, err = command(monkeypatch, capsys, logs, "model=local", "model.spec=no-such-model")
    assert status == 2 and err.startswith("error: unknown model 'no-such-model'") and err.count("\n") == 1


# ----------------------------------------------------------------------------------------------
# Results file and leaderboard


def test_results_reader_rejects_bad_lines(tiny_model_dir, corpus, tmp_path):
    row = run(tiny_model_dir, corpus, tmp_path)
    path = tmp_path / "forgetting.jsonl"
    broken = json.loads(json.dumps(row))
    broken["points"][0]["copy_mean"] = None
    path.write_text(path.read_text() + json.dumps(broken) + "\n")
    with pytest.raises(PipelineError, match=r"line 2 .*points\[0\]\.copy_mean"):
        forgetting_results.read_rows(path)
    with pytest.raises(PipelineError, match=r"wall_seconds \(nan\) is not a finite number"):
        forgetting_results.append(tmp_path / "strict.jsonl", {**row, "wall_seconds": float("nan")})


def test_leaderboard_memory_columns(tmp_path):
    from tests.support import base_rows, write_lines

    scores = write_lines(tmp_path / "scores.jsonl", base_rows())
    memory = {"fine": 512, "fine_censored": False, "coarse": 4094, "coarse_censored": True}
    row = {"schema": forgetting_results.SCHEMA, "result_id": "r1", "model_name": "smollm2-135m"}
    smol = {"spec": "smollm2-135m", "kind": "embedded", "revision": None, "file_sha256": "00" * 32}
    row.update(date="2026-11-22T05:00:00+00:00", model=smol, settings={}, text={}, complete=True)
    row.update(memory={**memory, "largest_measured": 4094})
    row["points"] = [{"length": 8, "beyond_context": False, "error": "x"}]
    old = {**row, "result_id": "r0", "date": "2026-11-21T05:00:00+00:00"}
    write_lines(tmp_path / "forgetting.jsonl", [row, old])
    plain = leaderboard.render(read_scores(scores), tmp_path / "plain")
    assert "fine memory" not in plain["leaderboard.md"].read_text()
    paths = leaderboard_command.run(leaderboard_cfg(scores, tmp_path / "out"))
    md = paths["leaderboard.md"].read_text()
    assert "| fine memory | coarse memory |" in md and "| 512 | >4094 |" in md
    rows = {r["model"]: r for r in csv.DictReader(paths["leaderboard.csv"].open())}
    smol = rows["smollm2-135m"]
    assert smol["coarse_memory"] == "4094" and smol["coarse_memory_censored"] == "true"
    assert smol["forgetting_result_id"] == "r1" and rows["gemma3-270m"]["fine_memory"] == ""


def leaderboard_cfg(scores: Path, out: Path):
    from tests.support import compose_config

    return compose_config("leaderboard", [f"results={scores}", f"out_dir={out}"])


@pytest.mark.integration
def test_embedded_smollm2_short_curve(tmp_path):
    out = [f"results={tmp_path / 'f.jsonl'}", f"plot_dir={tmp_path}", "progress=false"]
    cfg = compose_forgetting([*out, "grid=linear", "n=1", "R=1", "max_length=64"])
    row = forgetting_run(cfg)
    assert row["model"]["bos_from"] == "tokenizer" and row["settings"]["context"] == 8192
    (point,) = row["points"]
    assert point["input_tokens"] == 131 and point["copy_mean"] > point["lm_mean"]
