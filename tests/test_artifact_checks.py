"""Artifacts edited as an adversary would (every hash recomputed): each damage is one PipelineError
that names the table, the column, the row and the document, before any number is computed; an
artifact location that is no local folder nor a Hub dataset is refused. Crafted from the tiny stage-1
artifact."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from pipeline.artifact import schema
from pipeline.artifact.reader import load_artifact
from pipeline.artifact.schema import settings_fingerprint
from pipeline.errors import PipelineError
from pipeline.files import write_table_atomic
from pipeline.provenance import file_sha256, text_sha256
from tests.conftest import STAGE1_TEXTS

Edit = Callable[[pl.DataFrame], pl.DataFrame]


def craft(
    src: Path,
    dst: Path,
    *,
    documents: Edit | None = None,
    tokens: Edit | None = None,
    spans: Edit | None = None,
    manifest: Callable[[dict], None] | None = None,
) -> Path:
    """A copy of ``src`` with tables edited and every file hash (and row count) in the manifest redone."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("views"))
    record = json.loads((dst / "manifest.json").read_text())
    for name, edit in (("documents", documents), ("tokens", tokens), ("spans", spans)):
        if edit is None:
            continue
        path = dst / f"{name}.parquet"
        table = edit(pl.read_parquet(path)).to_arrow().cast(schema.TABLES[name])
        write_table_atomic(path, table)
        record["files"][path.name] = {
            "sha256": file_sha256(path),
            "bytes": path.stat().st_size,
            "rows": len(table),
        }
    if manifest is not None:
        manifest(record)
    (dst / "manifest.json").write_text(json.dumps(record))
    return dst


def cell(column: str, row: int, value) -> Edit:
    def edit(df: pl.DataFrame) -> pl.DataFrame:
        df = df.clone()
        df[row, column] = value
        return df

    return edit


def first_key_row(df: pl.DataFrame) -> int:
    return int(df.with_row_index().filter(pl.col("is_key"))["index"][0])


def first_plain_row(df: pl.DataFrame) -> int:
    return int(df.with_row_index().filter(~pl.col("is_key") & pl.col("lsd").is_not_null())["index"][0])


def changed_text(df: pl.DataFrame) -> pl.DataFrame:
    """The first document's text with one letter changed (same length), its sha256 recomputed."""
    text = df["text"][0]
    i = text.index("e")
    new = text[:i] + "a" + text[i + 1 :]
    return cell("sha256", 0, text_sha256(new))(cell("text", 0, new)(df))


def shorter_text(df: pl.DataFrame) -> pl.DataFrame:
    text = df["text"][0][:20]
    df = cell("text", 0, text)(df)
    return cell("n_chars", 0, 20)(cell("sha256", 0, text_sha256(text))(df))


def swap_span(df: pl.DataFrame) -> pl.DataFrame:
    start, end = df["char_start"][0], df["char_end"][0]
    return cell("char_end", 0, start)(cell("char_start", 0, end)(df))


def duplicate_id(df: pl.DataFrame) -> pl.DataFrame:
    return cell("doc_id", 1, df["doc_id"][0])(df)


def set_setting(key: str, value) -> Callable[[dict], None]:
    def edit(record: dict) -> None:
        record["settings"][key] = value
        record["fingerprint"] = settings_fingerprint(record["settings"])  # as an editor would

    return edit


def plain_token_after_the_first_window(df: pl.DataFrame, length: int = 1) -> int:
    """A non-key token of doc-0 past the first short window, with at least ``length`` characters
    that are not whitespace."""
    text = STAGE1_TEXTS[0]  # doc-0's source: its text is a prefix
    rows = df.with_row_index().filter(
        (pl.col("doc_id") == "doc-0") & ~pl.col("is_key") & (pl.col("token_index") > 30)
    )
    for i, a, b in zip(rows["index"], rows["char_start"], rows["char_end"], strict=True):
        if b - a >= length and not text[a:b].isspace() and not text[a].isspace():
            return int(i)
    raise AssertionError("no such token")


def moved_end(df: pl.DataFrame) -> pl.DataFrame:
    """A non-key token's char_end moved over the next 12 tokens (the spans stay the merge)."""
    row = plain_token_after_the_first_window(df)
    return cell("char_end", row, df["char_end"][row + 12])(df)


def uncovered_letter(df: pl.DataFrame) -> pl.DataFrame:
    """A non-key token's char_start moved one character on: a letter no token covers."""
    row = plain_token_after_the_first_window(df, length=2)
    return cell("char_start", row, df["char_start"][row] + 1)(df)


def shorter_source(df: pl.DataFrame) -> pl.DataFrame:
    """A truncated document whose source is said to be no longer than its text."""
    return cell("n_source_chars", 0, df["n_chars"][0])(df)


# name: (how the artifact is damaged, the error it must give)
CASES: dict[str, tuple[dict, str]] = {
    # silent wrong numbers before
    "span_past_the_text": (
        {"spans": lambda df: cell("char_end", 0, 10_000)(df)},
        r"spans\.parquet row 0 \(document 'doc-0'\), column char_end: past the end of the text",
    ),
    "negative_span_start": (
        {"spans": cell("char_start", 0, -3)},
        r"spans\.parquet row 0 \(document 'doc-0'\), column char_start: not 0 <= char_start <= char_end",
    ),
    "widened_span": (
        {"spans": lambda df: cell("char_end", 0, df["char_end"][0] + 1)(df)},
        r"spans\.parquet row 0 \(document 'doc-0'\), column char_end: not the merge of the key tokens",
    ),
    "n_spans_too_low": (
        {"documents": lambda df: cell("n_spans", 0, df["n_spans"][0] - 1)(df)},
        r"document 'doc-0' has \d+ rows in spans\.parquet but documents\.n_spans says \d+",
    ),
    "negative_soft_weight": (
        {"tokens": lambda df: cell("soft_weight", first_plain_row(df), -1.0)(df)},
        r"tokens\.parquet row \d+ \(document 'doc-0'\), column soft_weight: not min\(exp\(lsd\), gamma=5",
    ),
    "infinite_soft_weight": (
        {"tokens": lambda df: cell("soft_weight", first_plain_row(df), float("inf"))(df)},
        r"column soft_weight: not a finite number \(inf\)",
    ),
    "nan_lsd": (
        {"tokens": lambda df: cell("lsd", first_plain_row(df), float("nan"))(df)},
        r"column lsd: not a finite number \(nan\)",
    ),
    "infinite_lsd": (
        {"tokens": lambda df: cell("lsd", first_key_row(df), float("inf"))(df)},
        r"column lsd: not a finite number \(inf\)",
    ),
    "is_key_contradicts_lsd": (
        {"tokens": lambda df: cell("is_key", first_plain_row(df), True)(df)},
        r"column is_key: not lsd > alpha=0\.5 and long_logprob > beta=-30\.0",
    ),
    "span_of_another_document": (
        {"spans": lambda df: cell("doc_id", 0, "doc-1")(df)},
        r"document 'doc-0' has \d+ rows in spans\.parquet but documents\.n_spans says \d+",
    ),
    "no_documents": (
        {name: (lambda df: df.head(0)) for name in ("documents", "tokens", "spans")},
        r"has no documents",
    ),
    "threshold_edited_in_the_manifest": (
        {"manifest": set_setting("alpha", 0.25)},
        r"column is_key: not lsd > alpha=0\.25",
    ),
    "fingerprint_kept_for_other_settings": (
        {"manifest": lambda m: m["settings"].update(K=17)},
        r"the manifest's fingerprint is not that of its settings",
    ),
    # tracebacks before
    "reversed_span": (
        {"spans": swap_span},
        r"spans\.parquet row 0 \(document 'doc-0'\), column char_start: not 0 <= char_start <= char_end",
    ),
    "overlapping_spans": (
        {"spans": lambda df: cell("char_start", 1, df["char_start"][0])(df)},
        r"spans\.parquet row 1 \(document 'doc-0'\), column char_start: spans are not sorted and disjoint",
    ),
    "manifest_without_settings": (
        {"manifest": lambda m: m.pop("settings")},
        r"manifest\.json lacks K, d, alpha, beta, gamma, evaluator",
    ),
    "text_shorter_than_its_offsets": (
        {"documents": shorter_text},
        r"manifest documents\[0\]\.sha256 disagrees with documents\.parquet \(document 'doc-0'\)",
    ),
    "duplicate_document_ids": (
        {"documents": duplicate_id},
        r"documents\.parquet row 1 \(document 'doc-0'\), column doc_id: duplicate document id",
    ),
    # second round: loaded with the fingerprint recomputed before
    "token_end_moved_over_the_next_tokens": (
        {"tokens": moved_end},
        r"tokens\.parquet row \d+ \(document 'doc-0'\), column char_end: before the previous token's end",
    ),
    "a_letter_no_token_covers": (
        {"tokens": uncovered_letter},
        r"column char_start: leaves characters before it that no token covers and that are not whitespace",
    ),
    "truncated_but_as_long_as_its_source": (
        {"documents": shorter_source},
        r"documents\.parquet row 0 \(document 'doc-0'\), column truncated: true, but the text is as long",
    ),
    "max_tokens_below_the_token_count": (
        {"manifest": set_setting("max_tokens", 100)},
        r"documents\.parquet row 0 \(document 'doc-0'\), column n_tokens: more than max_tokens=100",
    ),
    "K_rewritten": (
        {"manifest": set_setting("K", 2048)},
        r"tokens\.parquet row 15 \(document 'doc-0'\), column short_logprob: not null exactly before "
        r"sequence position K=2048",
    ),
    "K_one_more": (
        {"manifest": set_setting("K", 17)},
        r"tokens\.parquet row 15 \(document 'doc-0'\), column short_logprob: not null exactly before",
    ),
    "d_rewritten_larger": (
        {"manifest": set_setting("d", 12)},
        r"tokens\.parquet row 23 \(document 'doc-0'\), column short_logprob: differs from long_logprob in "
        r"the first short window, positions \[16, 28\)",
    ),
    "d_rewritten_smaller": (
        {"manifest": set_setting("d", 5)},
        r"column short_logprob: equals long_logprob at position K\+d=21 in every document that tells",
    ),
    "script_in_K": (
        {"manifest": set_setting("K", "<img src=x onerror=alert(1)>")},
        r"manifest settings\.K='<img src=x onerror=alert\(1\)>' is not a positive integer",
    ),
    "d_as_text": ({"manifest": set_setting("d", "8")}, r"manifest settings\.d='8' is not a positive integer"),
    "gamma_as_bool": (
        {"manifest": set_setting("gamma", True)},
        r"settings\.gamma=True is not a finite positive",
    ),
    "evaluator_spec_not_text": (
        {"manifest": lambda m: set_setting("evaluator", {**m["settings"]["evaluator"], "spec": 7})(m)},
        r"manifest settings\.evaluator\.spec is not a string",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_damaged_artifact_is_one_line(tiny_artifact, tmp_path, case):
    edits, message = CASES[case]
    root = craft(tiny_artifact, tmp_path / case, **edits)
    with pytest.raises(PipelineError, match=message) as info:
        load_artifact(root)
    assert "\n" not in str(info.value) and "regenerate" in str(info.value)


def manifest_text_hash(root):
    """A manifest editor that records the sha256 of the first text as ``root``'s documents.parquet
    now holds it (the edited text)."""

    def fix(record: dict) -> None:
        text = pl.read_parquet(root / "documents.parquet")["text"][0]
        record["documents"][0]["sha256"] = text_sha256(text)

    return fix


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


@pytest.fixture(scope="module")
def untruncated_artifact(tiny_model_dir, tmp_path_factory):
    from tests.conftest import compose_keytokens, keytokens_overrides, run_keytokens

    tmp = tmp_path_factory.mktemp("whole")
    corpus = tmp / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "short", "text": "Federal law provides powers. " * 6}) + "\n")
    run_keytokens(compose_keytokens(keytokens_overrides(tiny_model_dir, corpus, tmp)))
    return tmp / "test"


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
