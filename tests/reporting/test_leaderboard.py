"""Stage 3 on made-up scores: table order, correlations against scipy, determinism, selection, errors."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from scipy import stats

from pipeline.commands import leaderboard as leaderboard_command
from pipeline.errors import PipelineError
from pipeline.metric_registry import perplexities
from pipeline.reporting import correlations, leaderboard
from pipeline.results.score import RESULTS_VERSION, read_scores
from tests.support import BOARD_ARTIFACT as ARTIFACT
from tests.support import BOARD_SCORES as SCORES
from tests.support import ROOT, base_rows, write_lines
from tests.support import result_line as result

OLD_ARTIFACT = {"name": "govreport_sample--gemma3-270m--K512-d512-max2048", "fingerprint": "0f1e2d3c4b5a" * 4}
BENCHMARKS = {
    "smollm2-135m": (21.5, 14.0, 30.25),
    "qwen2.5-0.5b": (27.0, 22.0, 41.5),
    "gemma3-270m": (19.25, 18.0, 26.0),
}


def write_benchmarks(path: Path, rows: dict, header: str = "model,LongBench,LongEval,RULER") -> Path:
    body = "".join(
        f"{m}," + ",".join("" if v is None else str(v) for v in vals) + "\n" for m, vals in rows.items()
    )
    path.write_text(header + "\n" + body)
    return path


@pytest.fixture
def scores(tmp_path) -> Path:
    return write_lines(tmp_path / "scores.jsonl", base_rows())


@pytest.fixture
def bench(tmp_path) -> Path:
    return write_benchmarks(tmp_path / "benchmarks.csv", BENCHMARKS)


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_table_order_and_values(scores, tmp_path):
    paths = leaderboard.render(read_scores(scores), tmp_path / "out", source=scores)
    assert set(paths) == {"leaderboard.md", "leaderboard.csv", "leaderboard.png"}
    rows = read_csv(paths["leaderboard.csv"])
    assert [r["model"] for r in rows] == ["qwen2.5-0.5b", "smollm2-135m", "gemma3-270m"]
    assert [r["rank"] for r in rows] == ["1", "2", "3"]
    assert (
        rows[0]["longppl"] == "6.2500" and rows[0]["ppl"] == "14.5000" and rows[0]["longppl_soft"] == "9.3750"
    )
    assert rows[1]["longppl"] == "9.8125" and rows[2]["longppl"] == "11.6250"
    assert rows[0]["fingerprint"] == ARTIFACT["fingerprint"] and rows[0]["key_char_coverage"] == "0.9700"
    md = paths["leaderboard.md"].read_text()
    assert ARTIFACT["name"] in md and ARTIFACT["fingerprint"][:12] in md
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| # | model | LongPPL | PPL |")
    # lines of results schema 1 (no bits per byte): read, their bits/byte n/a
    assert table[2].startswith(
        "| 1 | qwen2.5-0.5b | 6.2500 | 14.5000 | 9.3750 | n/a | n/a | 800 | 50000 | 0.9700 |"
    )
    assert table[4].startswith("| 3 | gemma3-270m | 11.6250 |")
    assert paths["leaderboard.png"].read_bytes().startswith(b"\x89PNG")


def test_null_longppl_sorts_last(tmp_path):
    rows = [*base_rows(), result("tiny-0m", (40.0, None, None), "2026-11-22T04:00:00+00:00")]
    df = read_scores(write_lines(tmp_path / "s.jsonl", rows))
    board = leaderboard.select(df)
    assert board["entry"].to_list() == ["qwen2.5-0.5b", "smollm2-135m", "gemma3-270m", "tiny-0m"]
    out = read_csv(leaderboard.render(df, tmp_path / "out")["leaderboard.csv"])
    assert out[-1]["rank"] == "" and out[-1]["longppl"] == "" and out[-1]["ppl"] == "40.0000"


def test_correlations_match_scipy(scores, bench, tmp_path):
    paths = leaderboard.render(read_scores(scores), tmp_path / "out", bench, source=scores)
    assert {"correlations.md", "correlations.csv"} <= set(paths)
    assert {f"scatter-{b}.png" for b in ("LongBench", "LongEval", "RULER")} <= set(paths)
    models = sorted(SCORES)  # the pipeline passes the common models in name order
    written = {(r["metric"], r["benchmark"]): r for r in read_csv(paths["correlations.csv"])}
    board = leaderboard.select(read_scores(scores))
    table = correlations.correlations(board, correlations.load_benchmarks(bench))
    computed = {(r["metric"], r["benchmark"]): r for r in table.iter_rows(named=True)}
    assert len(written) == len(computed) == 9
    for m, (metric, label) in enumerate(perplexities().items()):
        assert metric in ("ppl", "longppl", "longppl_soft")
        xs = [SCORES[name][m] for name in models]
        for b, bench_name in enumerate(("LongBench", "LongEval", "RULER")):
            ys = [BENCHMARKS[name][b] for name in models]
            pearson, spearman = stats.pearsonr(xs, ys), stats.spearmanr(xs, ys)
            expected = (pearson.statistic, pearson.pvalue, spearman.statistic, spearman.pvalue)
            for row in (computed[(label, bench_name)], written[(label, bench_name)]):
                assert int(row["n"]) == 3
                got = [float(row[k]) for k in ("pearson_r", "pearson_p", "spearman_r", "spearman_p")]
                assert got == pytest.approx(expected, abs=1e-12, rel=0)
    md = paths["correlations.md"].read_text()
    assert "## Pearson r" in md and "## Spearman rho" in md and "| LongPPL |" in md


def test_benchmark_with_missing_values(tmp_path):
    rows = [*base_rows(), result("llama-1b", (12.0, 5.0, 7.5), "2026-11-22T05:00:00+00:00")]
    scores = write_lines(tmp_path / "s.jsonl", rows)
    values = {**BENCHMARKS, "llama-1b": (30.0, 25.0, None)}
    bench = write_benchmarks(tmp_path / "b.csv", values)
    paths = leaderboard.render(read_scores(scores), tmp_path / "out", bench)
    written = {(r["metric"], r["benchmark"]): r for r in read_csv(paths["correlations.csv"])}
    assert written[("LongPPL", "RULER")]["n"] == "3" and written[("LongPPL", "LongBench")]["n"] == "4"
    xs = [SCORES[m][1] for m in sorted(SCORES)]
    ys = [BENCHMARKS[m][2] for m in sorted(SCORES)]
    assert float(written[("LongPPL", "RULER")]["pearson_r"]) == pytest.approx(
        stats.pearsonr(xs, ys).statistic, abs=1e-12
    )
    assert (
        "RULER: no value for llama-1b; left out of its correlations." in paths["correlations.md"].read_text()
    )


def test_second_render_is_byte_identical(scores, bench, tmp_path):
    df = read_scores(scores)
    first = leaderboard.render(df, tmp_path / "a", bench, source=scores)
    second = leaderboard.render(read_scores(scores), tmp_path / "b", bench, source=scores)
    assert sorted(first) == sorted(second) and len(first) == 8
    for name in first:
        assert first[name].read_bytes() == second[name].read_bytes(), name
    made = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert made == sorted([*first, ".longppl-leaderboard"])  # its mark, and no temp files left


def test_rerender_without_benchmarks_removes_stale_correlations(scores, bench, tmp_path):
    df = read_scores(scores)
    leaderboard.render(df, tmp_path / "out", bench)
    paths = leaderboard.render(df, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted([*paths, ".longppl-leaderboard"])


def test_newest_row_wins(tmp_path):
    rows = [
        *base_rows(),
        # re-scored later (the same numbers within the refreshes' tolerance; beyond it they are a
        # conflict, test_leaderboard_entries): the newer date wins even though an older-dated line
        # comes after it
        result("qwen2.5-0.5b", (14.5, 6.2500002, 9.375), "2026-11-23T00:00:00+00:00"),
        result("qwen2.5-0.5b", (14.5, 6.2499998, 9.375), "2026-11-20T00:00:00+00:00"),
        # same date twice: the later line wins
        result("gemma3-270m", (16.75, 11.6250001, 13.0), "2026-11-23T00:00:00+00:00"),
        result("gemma3-270m", (16.75, 11.6250002, 13.0), "2026-11-23T00:00:00Z"),
        # other settings: separate entries
        result("smollm2-135m", (19.0, 10.5, 13.0), "2026-11-23T00:00:00+00:00", context_limit=512),
        result("smollm2-135m", (18.5, 9.9, 12.6), "2026-11-23T00:00:00+00:00", dtype="bfloat16"),
        # an older artifact is not shown by default
        result("smollm2-135m", (1.0, 1.0, 1.0), "2026-11-01T00:00:00+00:00", OLD_ARTIFACT),
    ]
    df = read_scores(write_lines(tmp_path / "s.jsonl", rows))
    assert df.height == len(rows)
    board = leaderboard.select(df)
    got = dict(zip(board["entry"], board["longppl"], strict=True))
    assert got == {
        "gemma3-270m": 11.6250002,
        "qwen2.5-0.5b": 6.2500002,
        "smollm2-135m[dtype=float32]": 9.8125,
        "smollm2-135m[dtype=bfloat16]": 9.9,
        "smollm2-135m@ctx512": 10.5,
    }
    assert list(got) == sorted(got, key=got.get)
    old = leaderboard.select(df, artifact=OLD_ARTIFACT["name"])
    assert old["entry"].to_list() == ["smollm2-135m"] and old["longppl"].to_list() == [1.0]
    by_prefix = leaderboard.select(df, artifact=OLD_ARTIFACT["fingerprint"][:8])
    assert by_prefix["fingerprint"].to_list() == [OLD_ARTIFACT["fingerprint"]]
    with pytest.raises(PipelineError, match=r"matches no scored artifact.*K512"):
        leaderboard.select(df, artifact="nope")


def test_benchmark_names_not_matching(scores, tmp_path):
    values = {"smollm2-135m": (1, 2, 3), "Qwen2.5-0.5B": (4, 5, 6), "gemma3-270m": (7, 8, 9), "x": (1, 1, 1)}
    bench = write_benchmarks(tmp_path / "b.csv", values)
    with pytest.raises(PipelineError) as info:
        leaderboard.render(read_scores(scores), tmp_path / "out", bench)
    message = str(info.value)
    assert "\n" not in message
    assert "not on the leaderboard: Qwen2.5-0.5B, x;" in message
    assert "without a benchmark row: qwen2.5-0.5b;" in message
    assert "must use the leaderboard's model names" in message
    assert not (tmp_path / "out").exists()  # nothing written on error


def test_fewer_than_three_common_models(scores, tmp_path):
    bench = write_benchmarks(tmp_path / "b.csv", {m: BENCHMARKS[m] for m in ("smollm2-135m", "gemma3-270m")})
    with pytest.raises(PipelineError, match=r"only 2 model\(s\) .* at least 3"):
        leaderboard.render(read_scores(scores), tmp_path / "out", bench)


def test_bad_benchmarks_file(scores, tmp_path):
    df = read_scores(scores)
    bad_header = write_benchmarks(tmp_path / "h.csv", BENCHMARKS, header="name,LongBench,LongEval,RULER")
    with pytest.raises(PipelineError, match="first column `model`"):
        leaderboard.render(df, tmp_path / "out", bad_header)
    text = write_benchmarks(tmp_path / "t.csv", {**BENCHMARKS, "gemma3-270m": ("high", 1, 2)})
    with pytest.raises(PipelineError, match="row 4: LongBench='high' is not a number"):
        leaderboard.render(df, tmp_path / "out", text)


def test_missing_or_empty_results(tmp_path):
    with pytest.raises(PipelineError, match=r"no scores in .*missing\.jsonl.*make score MODEL="):
        read_scores(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(PipelineError, match=r"no scores in .*empty\.jsonl"):
        read_scores(tmp_path / "empty.jsonl")


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ('{"model_name": "x", "artifact": }', "not JSON"),  # (a line cut short: test_results_files)
        ("[1, 2]", "not a JSON object"),
        (
            json.dumps({**result("x", (1.0, 1.0, 1.0), "2026-11-22T00:00:00+00:00"), "model_name": None}),
            "model_name",
        ),
        (json.dumps(result("x", ("high", 1.0, 1.0), "2026-11-22T00:00:00+00:00")), "corpus.ppl"),
        (json.dumps(result("x", (1.0, 1.0, 1.0), "yesterday")), "date"),
        (
            json.dumps(
                {
                    **result("x", (1.0, 1.0, 1.0), "2026-11-22T00:00:00+00:00"),
                    "schema_version": RESULTS_VERSION + 1,
                }
            ),
            f"schema_version` is {RESULTS_VERSION + 1}: written by a newer pipeline",
        ),
    ],
)
def test_malformed_line(tmp_path, bad, reason):
    path = write_lines(tmp_path / "s.jsonl", [*base_rows()[:2], bad, base_rows()[2]])
    with pytest.raises(PipelineError, match=rf"line 3 is not a valid result \(.*{reason}"):
        read_scores(path)


def compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return compose("leaderboard", overrides=overrides)


def test_config_defaults():
    cfg = compose([])
    assert cfg.results == "artifacts/results/scores.jsonl" and cfg.out_dir == "artifacts/leaderboard"
    assert cfg.artifact is None and cfg.benchmarks is None


def test_hydra_run_prints_markdown(scores, bench, tmp_path, capsys):
    cfg = compose([f"results={scores}", f"benchmarks={bench}", f"out_dir={tmp_path / 'out'}"])
    paths = leaderboard_command.run(cfg)
    printed = capsys.readouterr().out
    assert printed.startswith(paths["leaderboard.md"].read_text())
    assert f"wrote {tmp_path / 'out' / 'correlations.csv'}" in printed


def test_command_line(scores, tmp_path):
    """`python -m pipeline.commands.leaderboard`: Markdown on stdout; an error is one line, exit 2."""
    logs = f"hydra.run.dir={tmp_path / 'logs'}"
    command = [sys.executable, "-m", "pipeline.commands.leaderboard", logs, f"out_dir={tmp_path / 'out'}"]
    done = subprocess.run([*command, f"results={scores}"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# LongPPL leaderboard") and "| 1 | qwen2.5-0.5b |" in done.stdout
    failed = subprocess.run(
        [*command, f"results={tmp_path / 'none.jsonl'}"], cwd=ROOT, capture_output=True, text=True
    )
    assert failed.returncode == 2
    assert failed.stderr.startswith("error: no scores in ") and failed.stderr.count("\n") == 1


def test_bits_per_byte_columns_beside_old_lines(tmp_path):
    """A schema-2 line's bits per byte are shown; schema-1 lines beside it read as n/a."""
    new = result("new-model", (12.0, 5.0, 8.0), "2026-11-23T00:00:00+00:00")
    new["schema_version"] = 2
    new["corpus"] |= {"bpb": 0.8125, "key_bpb": 0.40625}
    path = write_lines(tmp_path / "scores.jsonl", [*base_rows(), new])
    df = read_scores(path)
    assert df.filter(pl.col("model_name") == "new-model")["bpb"].to_list() == [0.8125]
    assert df.filter(pl.col("model_name") != "new-model")["key_bpb"].null_count() == 3
    rows = {r["model"]: r for r in read_csv(leaderboard.render(df, tmp_path / "out")["leaderboard.csv"])}
    assert rows["new-model"]["bpb"] == "0.8125" and rows["new-model"]["key_bpb"] == "0.4062"
    assert rows["gemma3-270m"]["bpb"] == "" and list(rows["gemma3-270m"])[5:7] == ["bpb", "key_bpb"]


def test_load_results_columns(scores):
    df = read_scores(scores)
    assert df.height == 3 and df.schema["date"] == pl.Datetime("us", "UTC")
    for column in ("model_name", "artifact", "fingerprint", "context_limit", "ppl", "longppl", "result_id"):
        assert column in df.columns


def test_model_names_cannot_break_the_markdown_table(tmp_path):
    path = write_lines(tmp_path / "s.jsonl", [result("a|b\nc", (2.0, 1.5, 1.8), "2026-11-22T01:00:00+00:00")])
    md = leaderboard.render(read_scores(path), tmp_path / "out")["leaderboard.md"].read_text()
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(table) == 3 and table[2].startswith("| 1 | a\\|b c | 1.5000 |")


HOSTILE = "x$^$y <img src=x onerror=alert(1)> [a](javascript:alert(1))"


def test_names_with_dollars_and_html_are_shown_literally(tmp_path):
    """A ``$...$`` in a name is read as math by matplotlib (``x$^$y`` crashed the leaderboard); HTML
    and links in a name went raw into leaderboard.md."""
    rows = [*base_rows(), result(HOSTILE, (20.0, 10.0, 12.0), "2026-11-22T09:00:00+00:00")]
    scores = write_lines(tmp_path / "s.jsonl", rows)
    bench = write_benchmarks(
        tmp_path / "b.csv", {**BENCHMARKS, HOSTILE: (1.0, 2.0, 3.0)}, "model,x$^$<b>y,b2,b3"
    )
    paths = leaderboard.render(read_scores(scores), tmp_path / "out", bench)
    assert paths["leaderboard.png"].read_bytes().startswith(b"\x89PNG")
    for name in ("leaderboard.md", "correlations.md"):
        md = paths[name].read_text()
        assert "<img" not in md.replace("\\<img", "") and "<b>" not in md.replace("\\<b\\>", "")
        assert "](javascript" not in md.replace("\\](javascript", "")
    assert (
        r"x$^$y \<img src=x onerror=alert(1)\> \[a\](javascript:alert(1))"
        in paths["leaderboard.md"].read_text()
    )
    assert {r["model"] for r in csv.DictReader(paths["leaderboard.csv"].open())} >= {HOSTILE}  # CSV: as is


FORMULAS = ['=HYPERLINK("http://x","y")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A2)"]


def test_a_csv_cell_that_a_spreadsheet_would_run_is_neutralised(tmp_path, bench):
    """Model names starting with =, +, - or @ (a tab or a carriage return too) were written as they are,
    so a spreadsheet ran them as formulas: they get OWASP's leading single quote, while a negative number (a
    correlation) stays a number."""
    rows = [*base_rows()] + [result(name, (20.0 + i, 10.0, 12.0), "2026-11-22T09:00:00+00:00")
                             for i, name in enumerate(FORMULAS)]  # fmt: skip
    paths = leaderboard.render(read_scores(write_lines(tmp_path / "s.jsonl", rows)), tmp_path / "out", bench)
    models = {r["model"] for r in read_csv(paths["leaderboard.csv"])}
    assert {"'" + name for name in FORMULAS} <= models and not set(FORMULAS) & models
    cells = [c for r in read_csv(paths["correlations.csv"]) for c in r.values()]
    assert any(c.startswith("-0.") for c in cells) and not any(c.startswith("'-") for c in cells)
    from pipeline.reporting.common import csv_cell

    assert [csv_cell(c) for c in ("-0.25", "+1e-05", "-3", "1.5", "-12.5%", "", None)] == [
        "-0.25", "+1e-05", "-3", "1.5", "-12.5%", None, None
    ]  # fmt: skip
    assert [csv_cell(c) for c in ("-inf", "-1-1", "=1", "a=b")] == ["'-inf", "'-1-1", "'=1", "a=b"]
    assert [csv_cell(c) for c in ("\tx", "\rx", "x\t")] == ["'\tx", "'\rx", "x\t"]  # a tab, a carriage return
