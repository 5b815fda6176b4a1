"""The key_spans artifact kind (key spans without per-token values): reading, scoring, the results
file and leaderboard, publishing, refreshes against expected values."""

from __future__ import annotations

import json

import pytest

from pipeline.artifact.reader import iter_documents, load_artifact
from pipeline.artifact.schema import (
    KEY_SPANS,
    KINDS,
    MANIFEST,
    PER_TOKEN,
)
from pipeline.commands import leaderboard_refresh as refresh_command
from pipeline.commands import publish as publish_command
from pipeline.errors import PipelineError
from pipeline.reporting import keytoken_page, leaderboard
from pipeline.results.score import read_scores
from pipeline.score.sums import official_aggregate, official_aggregate_before_a7082c3
from tests.support import compose_config, score


def test_the_kind_is_declared_and_read(spans_artifact, tiny_artifact):
    art = load_artifact(spans_artifact)
    assert KINDS == {PER_TOKEN: ("documents", "tokens", "spans"), KEY_SPANS: ("documents", "spans")}
    assert art.kind == KEY_SPANS and art.tokens is None and not art.has_token_values
    assert not (spans_artifact / "tokens.parquet").exists()
    assert load_artifact(tiny_artifact).kind == PER_TOKEN and load_artifact(tiny_artifact).has_token_values
    doc = next(iter_documents(art))
    assert doc.eval_offsets is None and len(doc.span_starts) > 0
    with pytest.raises(PipelineError, match=r"alpha, beta.* needs per-token LSD"):
        doc.spans_at(2.0, -2.0)


def test_an_unknown_kind_is_an_error(spans_artifact, tmp_path):
    manifest = json.loads((spans_artifact / MANIFEST).read_text())
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("documents.parquet", "spans.parquet"):
        (copy / name).write_bytes((spans_artifact / name).read_bytes())
    (copy / MANIFEST).write_text(json.dumps({**manifest, "kind": "logits"}))
    with pytest.raises(
        PipelineError, match="artifact kind 'logits'; this pipeline reads per_token, key_spans"
    ):
        load_artifact(copy)


def test_scores_ppl_and_longppl_and_says_why_soft_is_missing(
    spans_artifact, tiny_artifact, other_model_dir, tmp_path
):
    full = score(other_model_dir, tiny_artifact, tmp_path)
    spans = score(other_model_dir, spans_artifact, tmp_path)
    for key in ("ppl", "longppl", "n_key_tokens", "n_tokens", "key_char_coverage"):
        assert spans["corpus"][key] == full["corpus"][key]
    assert full["corpus"]["longppl_soft"] is not None and spans["corpus"]["longppl_soft"] is None
    assert spans["corpus"]["grid"] == {} and all(d["longppl_soft"] is None for d in spans["documents"])
    assert set(spans["corpus"]["unavailable"]) == {"longppl_soft", "grid"}
    assert spans["artifact"]["kind"] == KEY_SPANS and full["artifact"]["kind"] == PER_TOKEN
    frame = read_scores(tmp_path / "scores.jsonl")
    assert frame["unavailable"].to_list()[0] is None and "per-token LSD" in frame["unavailable"][1]
    board = leaderboard.leaderboard_markdown(leaderboard.select(frame, "spans-only"))
    assert "| n/a |" in board and "\nn/a: LongPPL-soft needs per-token LSD" in board


def test_publish_and_page(spans_artifact, tmp_path):
    import datasets

    cfg = compose_config(
        "publish",
        [f"artifact={spans_artifact}", "repo=org/spans", "dry_run=true", f"out_dir={tmp_path / 'f'}"],
    )
    folder = publish_command.run(cfg)
    card = (folder / "README.md").read_text()
    assert "config_name: spans" in card and "config_name: tokens" not in card and "kind: key_spans" in card
    assert (
        datasets.load_dataset(str(folder), "spans", split="train").num_rows
        == load_artifact(folder).spans.num_rows
    )
    with pytest.raises(PipelineError, match="key_spans artifact"):
        keytoken_page.document_html(spans_artifact)


def test_refresh_against_expected_values_in_the_official_aggregate(tiny_artifact, other_model_dir, tmp_path):
    row = score(other_model_dir, tiny_artifact, tmp_path)
    mean = official_aggregate(row["documents"])
    # exp of the token-weighted mean log: the pooled value up to the weight of the unscored first token
    # (none here: BOS), so equal to rounding; the older arithmetic mean is never below it
    assert mean["ppl"] == pytest.approx(row["corpus"]["ppl"], rel=1e-9)
    assert official_aggregate_before_a7082c3(row["documents"])["ppl"] >= mean["ppl"]

    def config(ppl: float, longppl: float):
        expected = f"{{ppl: {ppl}, longppl: {longppl}}}"
        model = f"{{name: tiny, spec: '{other_model_dir}', revision: null, expected: {expected}}}"
        return compose_config(
            "leaderboard_refresh",
            [
                f"artifact={tiny_artifact}",
                "fingerprint=null",
                "contents=null",
                "discrete=null",
                f"recorded={tmp_path / 'none.jsonl'}",
                f"models=[{model}]",
                "aggregate=official",
                "tolerance=0.01",
                "settings.dtype=float64",
                "+settings.head_chunk=16",
            ],
        )

    refresh_command.run(config(mean["ppl"] * 1.005, mean["longppl"] * 0.995))  # within 1%: passes
    with pytest.raises(PipelineError, match=r"tiny: longppl is .* now, expected .*relative tolerance 0\.01"):
        refresh_command.run(config(mean["ppl"], mean["longppl"] * 1.02))
