"""An artifact checked against the inputs it was made from, where they are at hand
(``pipeline.artifact.inputs``): its tokens re-tokenised with the evaluator's tokenizer (its
tokenizer.json first, transformers where that disagrees), its truncated texts against their sources,
its cut where max_tokens puts it. Edits across tables, with every hash and the fingerprint redone,
fail there; what no check can prove is in docs/guarantees.md."""

from __future__ import annotations

import json

import polars as pl
import pytest

from pipeline.artifact import inputs
from pipeline.artifact.reader import load_artifact
from pipeline.errors import PipelineError
from pipeline.provenance import text_sha256
from tests.support import (
    cell,
    craft,
    first_key_row,
    key_end_over_the_next_tokens,
    manifest_text_hash,
    remerged,
    set_setting,
)


def test_key_token_end_moved_over_the_next_tokens(tiny_artifact, tmp_path):
    """The issue's case: one key token's char_end over the next 12 tokens, the spans re-merged."""
    root = remerged(tiny_artifact, tmp_path / "moved", key_end_over_the_next_tokens())
    with pytest.raises(
        PipelineError, match=r"tokens\.parquet row \d+ .* column char_end: before the previous"
    ):
        load_artifact(root)


@pytest.fixture
def tokenizer_at_hand(monkeypatch, tokenizer, tiny_model_dir, tmp_path):
    """The tiny evaluator's tokenizer as the one at hand (a local evaluator never is): its
    ``tokenizer.json`` first, then as transformers loads it; and a fresh record of completed checks."""

    def at_hand(settings, views):
        return inputs.Retokeniser("tiny", str(tiny_model_dir), {}, tiny_model_dir / "tokenizer.json")

    monkeypatch.setattr(inputs, "evaluator_tokenizer", at_hand)
    monkeypatch.setenv("LONGPPL_CACHE", str(tmp_path / "cache"))


def test_genuine_artifact_passes_against_its_tokenizer_and_sources(
    tiny_artifact, tokenizer_at_hand, tmp_path
):
    art = load_artifact(tiny_artifact)
    assert art.checked == {
        "tokenizer": "re-tokenised with tiny's tokenizer",
        "sources": "3 of 3 truncated texts found in their source",
    }
    assert list((tmp_path / "cache" / inputs.VERIFIED).iterdir())  # remembered for the next load
    assert load_artifact(tiny_artifact).checked == art.checked


def test_offsets_that_still_run_forward_fail_against_the_tokenizer(
    tiny_artifact, tokenizer_at_hand, tmp_path
):
    """A key token swallows the next three, which become empty tokens at its new end: offsets still run
    forward and cover the text; re-tokenising the text shows the difference."""

    def swallow(df: pl.DataFrame) -> pl.DataFrame:
        row = first_key_row(df)
        end = df["char_end"][row + 3]
        df = cell("char_end", row, end)(df)
        for r in range(row + 1, row + 4):
            df = cell("char_end", r, end)(cell("char_start", r, end)(df))
        return df

    root = remerged(tiny_artifact, tmp_path / "swallow", swallow)
    with pytest.raises(
        PipelineError,
        match=r"document 'doc-0': tokens\.parquet row \d+, column char_end is \d+, re-tokenising the text "
        r"with the evaluator's tokenizer gives \d+",
    ):
        load_artifact(root)


def test_the_tokenizer_file_first_and_transformers_where_it_disagrees(
    tiny_artifact, tiny_model_dir, monkeypatch, tmp_path
):
    """The fast tokenizer's own file decides alone when it gives the stored tokens (transformers' slower
    load is skipped); a file that disagrees (here without its merges) defers to transformers, which
    decides."""
    spec = json.loads((tiny_model_dir / "tokenizer.json").read_text())
    spec["model"]["merges"] = []
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    monkeypatch.setenv("LONGPPL_CACHE", str(tmp_path / "cache"))
    made = []

    def at_hand(file):
        def make(settings, views):
            made.append(inputs.Retokeniser("tiny", str(tiny_model_dir), {}, file))
            return made[-1]

        return make

    monkeypatch.setattr(inputs, "evaluator_tokenizer", at_hand(tiny_model_dir / "tokenizer.json"))
    inputs.check_now(load_artifact(tiny_artifact, verify_hashes=False))
    assert made[-1].loaded["raw"] is not None and "full" not in made[-1].loaded
    monkeypatch.setattr(inputs, "evaluator_tokenizer", at_hand(tmp_path / "tokenizer.json"))
    checked, complete = inputs.check_now(load_artifact(tiny_artifact, verify_hashes=False))
    assert (
        complete
        and checked["tokenizer"] == "re-tokenised with tiny's tokenizer"
        and "full" in made[-1].loaded
    )


def test_flipped_truncated_flag_with_an_edited_key_span(untruncated_artifact, tmp_path):
    """The issue's case: an untruncated document flagged truncated, a key span's text edited."""
    spans = pl.read_parquet(untruncated_artifact / "spans.parquet")
    start = int(spans["char_start"][0])

    def edit(df: pl.DataFrame) -> pl.DataFrame:
        text = df["text"][0]
        new = text[:start] + ("X" if text[start] != "X" else "Y") + text[start + 1 :]
        df = cell("truncated", 0, True)(cell("text", 0, new)(df))
        return cell("sha256", 0, text_sha256(new))(df)

    fix = manifest_text_hash(tmp_path / "flipped")
    root = craft(untruncated_artifact, tmp_path / "flipped", documents=edit, manifest=fix)
    with pytest.raises(PipelineError, match=r"column truncated: true, but the text is as long as its source"):
        load_artifact(root)


def test_edited_truncated_text_against_its_source(tiny_artifact, tmp_path):
    """A truncated text with one letter changed (its hashes redone) differs from its source, which is
    at hand; without the source, nothing can tell (docs/guarantees.md, "What no check can prove")."""
    from tests.support import changed_text

    fix = manifest_text_hash(tmp_path / "changed")
    root = craft(tiny_artifact, tmp_path / "changed", documents=changed_text, manifest=fix)
    with pytest.raises(
        PipelineError, match=r"document 'doc-0': the text differs from its source at character \d+"
    ):
        load_artifact(root)

    def elsewhere(record: dict) -> None:  # corpus.path is not in the fingerprint: a location
        fix(record)
        record["settings"]["corpus"]["path"] = str(tmp_path / "gone.jsonl")

    away = craft(tiny_artifact, tmp_path / "away", documents=changed_text, manifest=elsewhere)
    assert load_artifact(away).checked["sources"].startswith("not at hand")


def test_the_cut_is_where_max_tokens_puts_it(tiny_artifact, tokenizer_at_hand, tmp_path):
    """max_tokens rewritten upwards (fingerprint redone): every count still fits, but stage 1 would
    have kept more of each source."""
    root = craft(tiny_artifact, tmp_path / "max", manifest=set_setting("max_tokens", 160))
    with pytest.raises(
        PipelineError, match=r"stage 1 keeps \d+ characters of its source \(max_tokens=160\), the "
    ):
        load_artifact(root)


@pytest.mark.integration
def test_the_issues_cases_on_the_default_artifact(tmp_path):
    """The default artifact cut to its untruncated document govreport-09 (hashes and fingerprint
    redone) loads, re-tokenised with Gemma's tokenizer; the issue's edits of it do not."""
    from tests.support import default_artifact

    keep = "govreport-09"

    def only(df: pl.DataFrame) -> pl.DataFrame:
        df = df.filter(pl.col("doc_id") == keep)
        return df.with_columns(doc_index=pl.lit(0, pl.Int32)) if "doc_index" in df.columns else df

    def one_document(record: dict) -> None:
        record["documents"] = [d for d in record["documents"] if d["doc_id"] == keep]
        set_setting("documents", [d for d in record["settings"]["documents"] if d["doc_id"] == keep])(record)

    cut = craft(
        default_artifact(), tmp_path / "cut", documents=only, tokens=only, spans=only, manifest=one_document
    )
    assert load_artifact(cut).checked["tokenizer"] == "re-tokenised with gemma3-270m's tokenizer"
    cases = {
        "moved": (
            remerged(cut, tmp_path / "moved", key_end_over_the_next_tokens()),
            "column char_end: before",
        ),
        "K": (craft(cut, tmp_path / "K", manifest=set_setting("K", 2048)), "position K=2048"),
        "d": (craft(cut, tmp_path / "d", manifest=set_setting("d", 512)), "at position K\\+d=1536"),
        "flag": (
            craft(cut, tmp_path / "flag", documents=cell("truncated", 0, True)),
            "as long as its source",
        ),
    }
    for root, message in cases.values():
        with pytest.raises(PipelineError, match=message):
            load_artifact(root)
