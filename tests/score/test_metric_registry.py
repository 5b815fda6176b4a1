"""A metric is declared once (``pipeline.metric_registry``): a toy metric registered here, in the test
only, reaches `make score`'s results line and summary, the results schema (checked, and read back into
the leaderboard's frame), lm-eval's metric list and results file, and a leaderboard column, with no file
of ``pipeline/`` naming it. The registry refuses a declaration the outputs could not take."""

from __future__ import annotations

import csv
import json
import math

import pytest

from pipeline import metric_registry
from pipeline.errors import PipelineError
from pipeline.metric_registry import metric, metrics, register_metric
from pipeline.reporting import leaderboard
from pipeline.results.score import read_scores
from tests.support import ROOT, score

TOY = "key_nats"  # the key tokens' mean NLL in nats: log LongPPL


@pytest.fixture
def toy(monkeypatch):
    """The registry with the toy metric added; as it was after the test."""
    monkeypatch.setattr(metric_registry, "REGISTRY", dict(metric_registry.REGISTRY))

    @register_metric(TOY, label="key nats", subset="key", kind="number")
    def key_nats(sums) -> float | None:
        return sums.nll / sums.n if sums.n > 0 else None

    return metric(TOY)


def test_the_product_names_no_metric_it_is_not_told_of():
    files = [p for p in (ROOT / "pipeline").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    named = [p for p in files if TOY in p.read_text(errors="replace")]
    assert not named, named


def test_a_toy_metric_reaches_the_score_line_the_schema_and_the_leaderboard(
    toy, other_model_dir, tiny_artifact, tmp_path, capsys
):
    row = score(other_model_dir, tiny_artifact, tmp_path)
    corpus = row["corpus"]
    assert list(corpus)[:6] == ["ppl", "longppl", "longppl_soft", "bpb", "key_bpb", TOY]  # registry order
    assert corpus[TOY] == pytest.approx(math.log(corpus["longppl"]), rel=1e-12)
    for doc in row["documents"]:
        assert doc[TOY] == (None if doc["longppl"] is None else pytest.approx(math.log(doc["longppl"])))
    assert f"key nats      {corpus[TOY]:.4f}" in capsys.readouterr().out  # make score's summary

    path = tmp_path / "scores.jsonl"
    frame = read_scores(path)  # validated by the results schema, then flattened
    assert frame[TOY].to_list() == [corpus[TOY]]
    line = json.loads(path.read_text())
    line["corpus"][TOY] = "small"
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(
        PipelineError, match=rf"line 1 is not a valid result \(`corpus\.{TOY}` is not a number\)"
    ):
        read_scores(path)

    files = leaderboard.render(frame, tmp_path / "board")
    with files["leaderboard.csv"].open(newline="") as f:
        (cells,) = list(csv.DictReader(f))
    assert cells[TOY] == f"{corpus[TOY]:.4f}"
    (header,) = [h for h in files["leaderboard.md"].read_text().splitlines() if h.startswith("| # |")]
    assert "| key bits/byte | key nats | key tokens |" in header


def test_a_toy_metric_reaches_lm_eval(toy, tiny_model_dir, tiny_artifact, tmp_path):
    lm_eval = pytest.importorskip(
        "lm_eval", reason="needs lm-eval: `make setup-lmeval` (make test installs it)"
    )
    from lm_eval.utils import handle_non_serializable

    from pipeline import api
    from pipeline.lmeval import LongPPLLM, task_manager
    from pipeline.lmeval.metrics import metric_list
    from pipeline.results.lmeval import read_lmeval_results

    assert {"metric": TOY, "aggregation": f"longppl_pooled_{TOY}", "higher_is_better": False} in metric_list()
    model = LongPPLLM(str(tiny_model_dir), dtype="float64", device="cpu", head_chunk=7)
    task = f"longppl_{tiny_artifact.name}"
    results = lm_eval.simple_evaluate(
        model=model,
        tasks=[task],
        task_manager=task_manager([tiny_artifact], root=tmp_path),
        bootstrap_iters=0,
    )
    results.pop("samples", None)
    expected = api.score(model.lm.model, model.lm.tokenizer, tiny_artifact, head_chunk=7).corpus
    assert results["results"][task][f"{TOY},none"] == expected[TOY]  # the same additions: equal
    written = tmp_path / "results_toy.json"
    written.write_text(json.dumps(results, default=handle_non_serializable))
    assert read_lmeval_results(written).frame[TOY].to_list() == [expected[TOY]]


def test_the_built_in_metrics_in_order():
    assert [(m.name, m.label, m.subset, m.kind, m.lmeval_name) for m in metrics()] == [
        ("ppl", "PPL", "all", "perplexity", "ppl"),
        ("longppl", "LongPPL", "key", "perplexity", "longppl"),
        ("longppl_soft", "LongPPL-soft", "soft", "perplexity", "longppl_soft"),
        ("bpb", "bits/byte", "all", "bits", "bits_per_byte"),
        ("key_bpb", "key bits/byte", "key", "bits", "key_bits_per_byte"),
    ]
    assert list(leaderboard.board_columns())[:7] == [
        "rank",
        "model",
        "longppl",
        "ppl",
        "longppl_soft",
        "bpb",
        "key_bpb",
    ]


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("ppl", {"label": "other", "subset": "all", "kind": "perplexity"}, "'ppl' is registered already"),
        ("n_tokens", {"label": "x", "subset": "all", "kind": "number"}, "names another field"),
        ("Bad,Name", {"label": "x", "subset": "all", "kind": "number"}, "lower-case letters"),
        ("toy", {"label": "x", "subset": "tail", "kind": "number"}, "its subset is one of all, key, soft"),
        ("toy", {"label": "x", "subset": "all", "kind": "count"}, "its kind one of perplexity"),
        (
            "toy",
            {"label": "x", "subset": "all", "kind": "bits", "lmeval_name": "bits_per_byte"},
            "belongs to",
        ),
    ],
)
def test_a_declaration_the_outputs_cannot_take_is_refused(monkeypatch, name, options, message):
    monkeypatch.setattr(metric_registry, "REGISTRY", dict(metric_registry.REGISTRY))
    with pytest.raises(PipelineError, match=message):
        register_metric(name, **options)(metric_registry.perplexity)
    register_metric("ppl", label="PPL", subset="all", kind="perplexity")(
        metric_registry.perplexity
    )  # again: no-op
    assert [m.name for m in metrics()] == ["ppl", "longppl", "longppl_soft", "bpb", "key_bpb"]
