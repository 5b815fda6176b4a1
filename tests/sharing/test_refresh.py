"""Leaderboard refresh: passes on recorded results, fails naming model and metric when one is altered;
compares every number a result records (a NaN never switches a comparison off), only runs of the same
model and settings, and checks the record before anything is scored."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.artifact.reader import load_artifact
from pipeline.commands import leaderboard_refresh as refresh_command
from pipeline.errors import PipelineError
from pipeline.sharing import refresh
from tests.support import cli, compose_config, genuine_line


def refresh_config(artifact, model_dir, recorded, *extra, models=None):
    loaded = load_artifact(artifact)
    models = models or f"[{{name: tiny, spec: '{model_dir}', revision: null}}]"
    return compose_config(
        "leaderboard_refresh",
        [
            f"artifact={artifact}",
            f"fingerprint={loaded.manifest['fingerprint']}",
            f"contents={loaded.contents}",
            f"discrete={loaded.identity.discrete}",
            f"recorded={recorded}",
            f"models={models}",
            f"work_dir={recorded.parent / 'work'}",
            "settings.dtype=float64",
            "+settings.head_chunk=16",
            *extra,
        ],
    )


def test_refresh_reproduces_on_any_launcher_and_detects_a_changed_number(
    tiny_artifact, other_model_dir, tiny_model_dir, tmp_path
):
    """Recorded one job after the other (Hydra's default launcher), reproduced exactly on the joblib
    launcher (two processes); an altered record fails, naming the model and the metric."""
    models = (
        f"[{{name: tiny, spec: '{other_model_dir}', revision: null}}, "
        f"{{name: own, spec: '{tiny_model_dir}', revision: null}}]"
    )
    recorded = tmp_path / "recorded.jsonl"
    one_by_one = refresh_command.run(
        refresh_config(tiny_artifact, None, recorded, "record=true", models=models)
    )
    parallel = refresh_command.run(
        refresh_config(tiny_artifact, None, recorded, "launcher=joblib", models=models)
    )
    assert [r["model_name"] for r in parallel] == ["tiny", "own"]
    assert [r["corpus"] for r in parallel] == [r["corpus"] for r in one_by_one]
    assert not list((tmp_path / "work").iterdir())  # the run's configs and scores are cleaned up
    rows = [json.loads(line) for line in recorded.read_text().splitlines()]
    rows[0]["corpus"]["longppl"] *= 1.001
    recorded.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(PipelineError, match=r"tiny: longppl is .* recorded .*relative tolerance 0\.0001"):
        refresh_command.run(refresh_config(tiny_artifact, None, recorded, models=models))
    rows[0]["corpus"]["longppl"] /= 1.001
    doc = next(iter(rows[1]["artifact"]["identity"]["documents"]))
    rows[1]["artifact"]["identity"]["documents"][doc]["keys"] = "f" * 32  # recorded on other key spans
    recorded.write_text("".join(json.dumps(row) + "\n" for row in rows))
    other = rf"recorded result of own .*scored on another artifact .*key tokens or key spans differ in {doc}"
    with pytest.raises(PipelineError, match=other) as e:
        refresh_command.run(refresh_config(tiny_artifact, None, recorded, models=models))
    assert "own" in str(e.value) and "tiny" not in str(e.value)


def test_refresh_rejects_another_artifact(tiny_artifact, other_model_dir, tmp_path):
    cfg = refresh_config(
        tiny_artifact, other_model_dir, tmp_path / "r.jsonl", "record=true", "fingerprint=abc123"
    )
    with pytest.raises(PipelineError, match="not the artifact the leaderboard was computed on"):
        refresh_command.run(cfg)


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


def test_a_refresh_compares_only_runs_of_the_same_model_and_settings(
    other_model_dir, tiny_artifact, tmp_path
):
    """With a context limit the refresh finds its results (named with @ctx16); a recorded result of
    other settings is not compared as if it were the run repeated; two models of one name are refused."""
    recorded = tmp_path / "recorded.jsonl"
    limited = ["+settings.context_limit=16"]
    refresh_command.run(refresh_config(tiny_artifact, other_model_dir, recorded, "record=true", *limited))
    refresh_command.run(refresh_config(tiny_artifact, other_model_dir, recorded, *limited))
    line = json.loads(recorded.read_text())
    line["settings"]["add_bos"] = False  # recorded with other settings (the numbers left as they are)
    recorded.write_text(json.dumps(line) + "\n")
    with pytest.raises(
        PipelineError,
        match=r"recorded result of tiny .*not of the run the refresh repeats \(add_bos: False recorded, "
        r"True now\)",
    ):
        refresh_command.run(refresh_config(tiny_artifact, other_model_dir, recorded, *limited))
    twice = f"[{{name: tiny, spec: '{other_model_dir}'}}, {{name: tiny, spec: '{other_model_dir}'}}]"
    with pytest.raises(PipelineError, match=r"setting models\.1: the name 'tiny' is already models\.0's"):
        refresh_command.run(refresh_config(tiny_artifact, None, recorded, "record=true", models=twice))


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
