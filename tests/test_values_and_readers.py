""" "The same artifact" judged on every value where both artifacts are at hand, a
refresh that compares every number a result records, conflicting results shown as a conflict, a
publish that never writes into a folder it did not make, and readers that refuse what writers refuse
(each refusal one line naming the file, the line and the field)."""

from __future__ import annotations

import copy
import csv
import json
import math
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from omegaconf import OmegaConf

from pipeline import definition
from pipeline.artifact.identity import differences
from pipeline.artifact.reader import load_artifact
from pipeline.commands import compare_artifacts
from pipeline.commands import publish as publish_command
from pipeline.errors import PipelineError
from pipeline.reporting import board, leaderboard
from pipeline.results import lines
from pipeline.results.scores import read_scores
from pipeline.sharing import refresh
from tests.conftest import ROOT, compose_config
from tests.test_artifact_checks import craft

SHARED = ROOT.parent / "shared" / "data"  # the cross-CPU artifacts (CI has them too)
RECORDED = ROOT / "conf" / "refresh" / "recorded.jsonl"  # a genuine result line (schema 5)


# ----------------------------------------------------------------------------------------------
# The same artifact, where both are at hand


def moved_values(manifest: dict, delta: float = 0.1):
    """An edit that moves long log-probs between three equally spaced plain tokens of doc-0 past its
    first short window (+delta, -2 delta, +delta; LSD and soft weight redone): every document's sums,
    weighted sums, minimum and maximum stay, so its value summaries do too, while single tokens move
    by up to 2 delta."""
    alpha, gamma = manifest["settings"]["alpha"], manifest["settings"]["gamma"]

    def edit(df: pl.DataFrame) -> pl.DataFrame:
        doc = df.with_row_index().filter(pl.col("doc_id") == "doc-0")
        long, short = doc["long_logprob"].to_numpy(), doc["short_logprob"].to_numpy()
        lsd, plain = long - short, ~doc["is_key"].to_numpy()
        plain &= np.arange(len(long)) >= manifest["settings"]["K"] + manifest["settings"]["d"]
        i, j, k = movable(long, lsd, plain, delta, alpha)
        out = df.clone()
        for at, moved in ((i, delta), (j, -2 * delta), (k, delta)):
            row, value = int(doc["index"][at]), float(long[at] + moved)
            out[row, "long_logprob"] = value
            out[row, "lsd"] = value - float(short[at])
            out[row, "soft_weight"] = float(definition.soft_weight(np.float64(value - short[at]), gamma))
        return out

    return edit


def movable(long: np.ndarray, lsd: np.ndarray, plain: np.ndarray, delta: float, alpha: float) -> tuple:
    """Three equally spaced plain tokens whose moved values stay plain, <= 0 and inside the document's
    range of long log-probs and LSD (so its minimum and maximum stay)."""
    margin = 1e-3
    top_lsd, top_long = min(alpha, np.nanmax(lsd)) - margin, min(np.nanmax(long), 0) - margin
    for step in range(1, len(long) // 2):
        for i in range(len(long) - 2 * step):
            j, k = i + step, i + 2 * step
            if np.isnan(lsd[[i, j, k]]).any() or not plain[[i, j, k]].all():
                continue
            ends_fit = max(lsd[i], lsd[k]) + delta < top_lsd and max(long[i], long[k]) + delta < top_long
            middle_fits = (
                lsd[j] - 2 * delta > np.nanmin(lsd) + margin
                and long[j] - 2 * delta > np.nanmin(long) + margin
            )
            if ends_fit and middle_fits:
                return i, j, k
    raise AssertionError("no three plain tokens to move values between")


def test_compare_artifacts_judges_every_value_when_both_are_at_hand(tiny_artifact, tmp_path):
    """Values moved between tokens keep every summary (the identities alone say "the same"), yet
    single tokens moved by 0.2 nats: with both tables at hand that is not the same artifact (on
    f0729ca: "the same artifact: yes", exit 0)."""
    genuine = load_artifact(tiny_artifact)
    edited_root = craft(tiny_artifact, tmp_path / "moved", tokens=moved_values(genuine.manifest))
    edited = load_artifact(edited_root)
    assert edited.contents != genuine.contents
    assert differences(edited.identity, genuine.identity) == []  # the summaries cannot tell
    cfg = compose_config("compare_artifacts", [f"a={tiny_artifact}", f"b={edited_root}"])
    with pytest.raises(
        PipelineError,
        match=r"not the same artifact: long_logprob values beyond the tolerance 0\.001 in doc-0 "
        r"\(3, max 0\.2\)",
    ):
        compare_artifacts.run(cfg)
    same = compare_artifacts.run(
        compose_config("compare_artifacts", [f"a={tiny_artifact}", f"b={tiny_artifact}"])
    )
    assert same["exact"]


@pytest.mark.skipif(not (SHARED / "cross-machine-intel").is_dir(), reason="needs ../shared/data")
def test_two_cpus_default_artifacts_are_still_the_same_artifact(capsys):
    """The default artifact made on an AMD AVX2 and on an Intel AVX-512 machine differ by up to 4.2e-4
    nats of LCL and 1.4e-3 of soft weight: value by value, still the same artifact."""
    cfg = compose_config(
        "compare_artifacts", [f"a={SHARED / 'cross-machine'}", f"b={SHARED / 'cross-machine-intel'}"]
    )
    result = compare_artifacts.run(cfg)
    columns = result["report"]["columns"]
    assert not result["exact"] and 4e-4 < columns["long_logprob"]["max"] < 1e-3
    assert 1e-3 < columns["soft_weight"]["max"] < 5e-3
    assert "the same artifact: yes (fingerprint, discrete contents, every value" in capsys.readouterr().out


# ----------------------------------------------------------------------------------------------
# A refresh compares every number; one entry's results that differ are a conflict


def genuine_line() -> dict:
    return json.loads(RECORDED.read_text().splitlines()[0])


def refresh_of(recorded: Path) -> refresh.Refresh:
    return refresh.Refresh(artifact="a", recorded=str(recorded), tolerance=1e-4, models=[])


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (
            lambda r: r["corpus"]["grid"]["alpha=1,beta=-1"].update(longppl=3.6407),
            r"corpus\.grid\.alpha=1,beta=-1\.longppl",
        ),
        (lambda r: r["documents"][3].update(longppl_soft=4.5), r"documents\.govreport-03\.longppl_soft"),
        (lambda r: r["corpus"].update(n_key_tokens=150), r"corpus\.n_key_tokens is 150 now, 149 recorded"),
    ],
)
def test_a_refresh_compares_every_number_the_result_records(tmp_path, edit, field):
    """A fresh result whose grid value, one document's value or a count differ from the record fails
    the refresh, naming the number (on f0729ca only PPL, LongPPL and LongPPL-soft were compared)."""
    recorded = genuine_line()
    fresh = copy.deepcopy(recorded)
    edit(fresh)
    model = SimpleNamespace(name="smollm2-135m", expected=None)
    check = refresh_of(tmp_path / "r.jsonl")
    assert (
        refresh.check_model(check, model, recorded, refresh.corpus_values(recorded, "pooled"), recorded) == []
    )
    problems = refresh.check_model(check, model, fresh, refresh.corpus_values(recorded, "pooled"), recorded)
    assert len(problems) == 1 and re.search(rf"smollm2-135m: {field}", problems[0]), problems


def test_a_nan_in_a_recorded_line_never_switches_the_comparison_off(tmp_path):
    """A NaN among a recorded line's per-document values is refused when the record is read (on
    f0729ca, aggregate=official made the recorded PPL NaN, and every comparison with NaN passed)."""
    line = genuine_line()
    line["documents"][2]["ppl"] = math.nan
    path = tmp_path / "recorded.jsonl"
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(
        PipelineError, match=rf"{path} line 1 is not a valid result \(`documents\[2\]\.ppl` is nan"
    ):
        refresh.recorded_rows(path)
    assert refresh.compare("m", {"ppl": 120.0}, {"ppl": math.nan}, 1e-4, ["ppl"])  # NaN never matches


def test_one_entrys_results_that_differ_are_shown_as_a_conflict(tmp_path):
    """Two results of one model, one artifact identity and one set of settings, LongPPL-soft 11.9645
    and 20.5938: the board shows the conflict, never silently the newest (on f0729ca: 20.5938)."""
    first = genuine_line()
    second = copy.deepcopy(first) | {"date": "2027-01-01T00:00:00+00:00"}
    second["corpus"]["longppl_soft"] = 20.5938
    path = tmp_path / "scores.jsonl"
    path.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    paths = leaderboard.render(read_scores(path), tmp_path / "out")
    md = paths["leaderboard.md"].read_text()
    assert "conflict: smollm2-135m has 2 results of one model, artifact and settings" in md
    assert "longppl\\_soft 11.964512826254357 against 20.5938" in md.replace("longppl_soft", "longppl\\_soft")
    (row,) = list(csv.DictReader(paths["leaderboard.csv"].open()))
    assert row["longppl_soft"] == "" and row["longppl"] == "" and row["rank"] == ""
    path.write_text(
        json.dumps(first) + "\n" + json.dumps(first | {"date": "2027-01-01T00:00:00+00:00"}) + "\n"
    )
    again = leaderboard.render(read_scores(path), tmp_path / "o2")["leaderboard.csv"]
    (row,) = list(csv.DictReader(again.open()))
    assert row["longppl_soft"] == "11.9645" and row["rank"] == "1"  # equal results: one entry, no conflict
    embedded = OmegaConf.load(ROOT / "conf" / "refresh" / "embedded.yaml")
    assert embedded.tolerance == board.CONFLICT_TOLERANCE  # the refreshes' tolerance


# ----------------------------------------------------------------------------------------------
# Publish never writes into a folder it did not make


def publish_config(artifact: Path, out: Path):
    return compose_config(
        "publish", [f"artifact={artifact}", "repo=org/keytokens", "dry_run=true", f"out_dir={out}"]
    )


def contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_publish_never_writes_into_a_folder_it_did_not_make(tiny_artifact, tmp_path):
    """out_dir= the artifact being published (on f0729ca: its documents.parquet deleted, then a
    traceback), another artifact (its tables replaced, exit 0), an empty folder of the user's: each
    refused in one line, nothing in them touched. A folder publish made is prepared anew."""
    victim = shutil.copytree(tiny_artifact, tmp_path / "victim", ignore=shutil.ignore_patterns("views"))
    other = shutil.copytree(tiny_artifact, tmp_path / "other", ignore=shutil.ignore_patterns("views"))
    (other / "manifest.json").write_text((other / "manifest.json").read_text() + " ")  # told apart
    (tmp_path / "empty").mkdir()
    before = {folder: contents(folder) for folder in (victim, other, tmp_path / "empty")}
    cases = [
        (victim, r"is the artifact being published"),
        (other, r"is a folder `make publish` did not make \(nothing was written into it\)"),
        (tmp_path / "empty", r"is a folder `make publish` did not make"),
        (victim / "card", r"is inside the artifact being published"),
    ]
    for out, message in cases:
        with pytest.raises(PipelineError, match=rf"out_dir={re.escape(str(out))} {message}"):
            publish_command.run(publish_config(victim, out))
    assert {folder: contents(folder) for folder in before} == before
    made = publish_command.run(publish_config(victim, tmp_path / "made"))
    assert publish_command.run(publish_config(victim, made)) == made  # its own folder, prepared anew
    assert load_artifact(made).contents == load_artifact(victim).contents


# ----------------------------------------------------------------------------------------------
# Readers refuse what writers refuse, in one line naming the file, the line and the field


def identity_values(line: dict) -> dict:
    return line["artifact"]["identity"]["documents"]["govreport-00"]["values"]


BAD_LINES = {
    "nan-in-a-document": (
        lambda r: r["documents"][1].update(ppl=math.nan),
        r"`documents\[1\]\.ppl` is nan, not a finite number",
    ),
    "summary-of-wrong-type": (
        lambda r: identity_values(r)["lsd"].update(sum="x"),
        r"`artifact\.identity\.documents\.govreport-00\.values\.lsd\.sum` is str 'x', not a finite number",
    ),
    "summaries-as-a-list": (
        lambda r: r["artifact"]["identity"]["documents"]["govreport-00"].update(values=[1]),
        r"`artifact\.identity\.documents\.govreport-00\.values` is list '\[1\]', not an object",
    ),
    "discrete-hash-a-number": (
        lambda r: r["artifact"]["identity"].update(discrete=5),
        r"`artifact\.identity\.discrete` is int '5', not a string",
    ),
    "1e308-perplexity": (
        lambda r: r["corpus"].update(ppl=1e308),
        r"`corpus\.ppl` is 1e\+308, beyond \+-1e\+300",
    ),
    "1e308-summary": (
        lambda r: identity_values(r)["soft_weight"].update(max=1e308),
        r"`artifact\.identity\.documents\.govreport-00\.values\.soft_weight\.max` is 1e\+308",
    ),
}


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_the_leaderboard_refuses_a_bad_line_in_one_line(tmp_path, case):
    """On f0729ca: a NaN, a 1e308 summary and a hash of the wrong type were read as good, a summary of
    the wrong type and a 1e308 perplexity gave tracebacks in the leaderboard."""
    edit, message = BAD_LINES[case]
    bad = genuine_line()
    edit(bad)
    path = tmp_path / "scores.jsonl"
    path.write_text(json.dumps(genuine_line()) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(
        PipelineError, match=rf"^{re.escape(str(path))} line 2 is not a valid result \(.*{message}"
    ):
        leaderboard.render(read_scores(path), tmp_path / "out")


def test_a_deeply_nested_or_huge_line_is_refused_in_one_line(tmp_path):
    """JSON nested 100,000 deep (on f0729ca: RecursionError) and a line over the size limit (on
    f0729ca: read whole, 50 MB took 21.6 GB) are one error each, naming the line."""
    good = json.dumps(genuine_line())
    path = tmp_path / "scores.jsonl"
    path.write_text(good + "\n" + good[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(PipelineError, match=rf"{re.escape(str(path))} line 2 .*nested deeper than 32 levels"):
        read_scores(path)
    path.write_text(good + "\n" + good[:-1] + ', "x": [' + "[" * 40 + "]" * 40 + "]}\n")
    with pytest.raises(PipelineError, match=r"line 2 .*`x\[0\]\[0\].*` is nested deeper than 32 levels"):
        read_scores(path)
    path.write_text(good + "\n" + good[:-1] + ', "x": "' + "a" * (lines.MAX_LINE_BYTES + 1) + '"}\n')
    with pytest.raises(PipelineError, match=rf"{re.escape(str(path))} line 2 is longer than 16777216 bytes"):
        read_scores(path)


def test_writers_refuse_what_readers_refuse(tmp_path):
    line = genuine_line()
    line["corpus"]["ppl"] = 1e308
    with pytest.raises(
        PipelineError, match=r"`corpus\.ppl` is 1e\+308, beyond \+-1e\+300.*nothing was written"
    ):
        lines.append(tmp_path / "scores.jsonl", line)
    assert not (tmp_path / "scores.jsonl").exists()


def test_lm_eval_results_are_read_with_the_same_refusals(tmp_path):
    """An lm-eval results file's LongPPL task with an identity record of the wrong type or a 1e308
    value (on f0729ca: read as good, then a traceback on the board) is one error naming the file,
    the task and the field."""
    from pipeline.results.lmeval import read_lmeval_results

    task = "longppl_x"
    record = {"name": "x", "contents": "c" * 64, "identity": {"discrete": "d" * 64, "documents": []}}
    data = {
        "results": {task: {"ppl,none": 12.5, "longppl,none": 6.5}},
        "configs": {task: {"metadata": {"longppl_fingerprint": "f" * 64, "longppl_artifact_record": record}}},
        "config": {"longppl_model_name": "m"},
        "n-samples": {task: {"original": 2, "effective": 2}},
    }
    path = tmp_path / "results_x.json"
    path.write_text(json.dumps(data))
    with pytest.raises(
        PipelineError,
        match=rf"{re.escape(str(path))}: task {task}: `longppl_artifact_record\.identity\.documents` is list",
    ):
        read_lmeval_results(path)
    record["identity"]["documents"] = {}
    data["results"][task]["longppl,none"] = 1e308
    path.write_text(json.dumps(data))
    with pytest.raises(PipelineError, match=rf"task {task}: `results\.{task}\.longppl,none` is 1e\+308"):
        read_lmeval_results(path)
