"""Every evidence span of an artifact is checked against its text on load, whatever its rule
(``pipeline.artifact.qa``: ``check_located``): on 70baafc only an ``exact`` span was, so an exact span
relabelled ``fuzzy`` and moved loaded, and moved `make loogle-keytokens`' p-value."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.artifact.reader import load_artifact
from pipeline.errors import PipelineError
from pipeline.provenance import file_sha256


def resealed_evidence(source: Path, root: Path, edit) -> None:
    """A copy of the artifact whose evidence table ``edit`` changed, its manifest's hash redone, as a
    careful forger would."""
    shutil.copytree(source, root)
    table = pq.read_table(root / "evidence.parquet")
    rows = table.to_pylist()
    edit(rows)
    pq.write_table(type(table).from_pylist(rows, table.schema), root / "evidence.parquet")
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["files"]["evidence.parquet"]["sha256"] = file_sha256(root / "evidence.parquet")
    (root / "manifest.json").write_text(json.dumps(manifest))


def first_exact(rows: list[dict]) -> dict:
    return next(r for r in rows if r["rule"] == "exact")


@pytest.mark.parametrize("fixture", ["loogle_artifact", "whole_loogle_artifact"])
def test_an_exact_span_relabelled_fuzzy_and_moved_is_refused(fixture, request, tmp_path):
    source = request.getfixturevalue(fixture)
    load_artifact(source)  # as written, it loads

    def relabel(rows):
        row = first_exact(rows)
        row.update(rule="fuzzy", char_start=row["char_start"] + 40, char_end=row["char_end"] + 40, ratio=0.95)

    resealed_evidence(source, tmp_path / "moved", relabel)
    with pytest.raises(
        PipelineError, match=r"is stored as fuzzy \[\d+, \d+\)[^;]*; its text locates it as exact"
    ) as caught:
        load_artifact(tmp_path / "moved")
    assert "\n" not in str(caught.value)


def shifted(rule: str):
    def edit(rows):
        row = next(r for r in rows if r["rule"] == rule)
        row.update(char_start=row["char_start"] + 1, char_end=row["char_end"] + 1)

    return edit


def miscounted(rows):
    row = first_exact(rows)
    row["occurrences"] += 1


@pytest.mark.parametrize(
    ("edit", "stored"), [(shifted("normalised"), "normalised"), (miscounted, "exact")], ids=["moved", "count"]
)
def test_a_whole_texts_spans_are_located_again_whatever_their_rule(
    edit, stored, whole_loogle_artifact, tmp_path
):
    """In a whole text every string is located again: a normalised span moved by one character, or an
    exact one whose occurrences were changed, is refused."""
    resealed_evidence(whole_loogle_artifact, tmp_path / "edited", edit)
    with pytest.raises(
        PipelineError,
        match=rf"is stored as {stored} \[\d+, \d+\) \(\d+ occurrences[^;]*; its text locates it as",
    ):
        load_artifact(tmp_path / "edited")
