"""Artifacts edited as an adversary would (every hash recomputed): each damage is one PipelineError
that names the table, the column, the row and the document, before any number is computed; an
artifact location that is no local folder nor a Hub dataset is refused. Crafted from the tiny stage-1
artifact."""

from __future__ import annotations

import pytest

from pipeline.artifact import schema
from pipeline.artifact.reader import load_artifact
from pipeline.errors import PipelineError
from tests.support import ARTIFACT_DAMAGES as CASES
from tests.support import changed_text, craft, manifest_text_hash, shorter_text, swap_span


@pytest.mark.parametrize("case", list(CASES))
def test_damaged_artifact_is_one_line(tiny_artifact, tmp_path, case):
    edits, message = CASES[case]
    root = craft(tiny_artifact, tmp_path / case, **edits)
    with pytest.raises(PipelineError, match=message) as info:
        load_artifact(root)
    assert "\n" not in str(info.value) and "regenerate" in str(info.value)


def test_text_shorter_than_its_offsets_with_every_hash_redone(tiny_artifact, tmp_path):
    """The editor also fixes the manifest's record of the text: the offsets still give it away."""
    fix = manifest_text_hash(tmp_path / "short")
    root = craft(tiny_artifact, tmp_path / "short", documents=shorter_text, manifest=fix)
    with pytest.raises(
        PipelineError, match=r"tokens\.parquet row \d+ \(document 'doc-0'\), column char_end: past"
    ):
        load_artifact(root)


def test_changed_text_of_an_untruncated_document(untruncated_artifact, tmp_path):
    """A text changed with its own sha256 and the manifest's redone: an untruncated text must be its
    source text, whose sha256 the fingerprint covers."""
    fix = manifest_text_hash(tmp_path / "changed")
    root = craft(untruncated_artifact, tmp_path / "changed", documents=changed_text, manifest=fix)
    with pytest.raises(
        PipelineError, match=r"column source_sha256: an untruncated text must be its source text"
    ):
        load_artifact(root)


def test_manifest_cut_off_or_not_strict_json(tiny_artifact, tmp_path):
    root = craft(tiny_artifact, tmp_path / "cut")
    text = (root / "manifest.json").read_text()
    (root / "manifest.json").write_text(text[: len(text) // 2])
    with pytest.raises(PipelineError, match=r"manifest\.json is not valid JSON .*cut off or damaged"):
        load_artifact(root)
    (root / "manifest.json").write_text(text.replace('"alpha": 0.5', '"alpha": NaN'))
    with pytest.raises(PipelineError, match=r"NaN is not a JSON number"):
        load_artifact(root)


def test_every_check_passes_on_the_genuine_artifact(tiny_artifact):
    art = load_artifact(tiny_artifact)
    assert art.documents.num_rows == 3 and art.tokens is not None


def test_a_kind_without_tokens_skips_only_the_token_checks(tiny_artifact, tmp_path, monkeypatch):
    """The hook for artifacts without per-token values (issue #13): a kind that declares no tokens
    table loads without tokens.parquet, and its spans are still checked."""
    monkeypatch.setitem(schema.KINDS, "spans_only", ("documents", "spans"))

    def kind(record: dict) -> None:
        record["kind"] = "spans_only"
        del record["files"]["tokens.parquet"]

    root = craft(tiny_artifact, tmp_path / "spans-only", manifest=kind)
    (root / "tokens.parquet").unlink()
    art = load_artifact(root)
    assert art.tokens is None and art.spans.num_rows > 0
    bad = craft(root, tmp_path / "spans-only-bad", spans=swap_span)
    with pytest.raises(PipelineError, match=r"spans\.parquet row 0 .*not 0 <= char_start <= char_end"):
        load_artifact(bad)
    unknown = craft(root, tmp_path / "unknown-kind", manifest=lambda m: m.update(kind="other"))
    with pytest.raises(PipelineError, match="artifact kind 'other'"):
        load_artifact(unknown)


def test_an_artifact_url_is_a_hub_dataset_or_refused(monkeypatch):
    from pipeline.artifact.reader import open_artifact

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PipelineError, match=r"^could not download key-token dataset 'org/none'"):
        open_artifact("HF://Datasets/org/none@main")  # the scheme in any case: the Hub, not ./HF:
    for location in ("hf://models/org/name", "HF://org/name"):
        with pytest.raises(
            PipelineError, match=f"^artifact {location}: not a local folder.*hf://datasets/<org>"
        ):
            open_artifact(location)
