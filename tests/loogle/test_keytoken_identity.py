"""A LooGLE artifact's identity covers its questions, answers, evidence and the alignment settings
(on 70baafc it covered the texts only): an edit of any of them in the data folder is other settings to
`make keytokens` (it refuses to call the artifact complete, one line), and `make compare-artifacts`
names an artifact whose questions were replaced and re-sealed as the same key tokens with other
questions, not "the same artifact: yes"."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.artifact.reader import load_artifact
from pipeline.commands import compare_artifacts
from pipeline.errors import PipelineError
from pipeline.provenance import file_sha256
from pipeline.text import locating
from tests.support import build_loogle_artifact, compose_config


def edited_folder(source: Path, folder: Path, field: str, value) -> Path:
    """A copy of a LooGLE folder whose first long-dependency question has ``field`` (A, Q, S, type)
    set to ``value``; the texts are unchanged."""
    shutil.copytree(source, folder)
    path = folder / "longdep_qa.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    pairs = ast.literal_eval(rows[0]["qa_pairs"])
    pairs[0][field] = value
    rows[0]["qa_pairs"] = repr(pairs)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("A", "a library"),
        ("S", ["In 1990 the line closed."]),
        ("Q", "What came first?"),
        ("type", "computation"),
    ],
    ids=["answer", "evidence", "question", "type"],
)
def test_an_edited_question_makes_keytokens_refuse_the_finished_artifact(
    field, value, tiny_model_dir, loogle_dir, tmp_path
):
    folder = edited_folder(loogle_dir, tmp_path / "data", "A", "a museum")  # the same questions
    out = tmp_path / "out"
    root = build_loogle_artifact(out, tiny_model_dir, folder)
    first = load_artifact(root)
    build_loogle_artifact(out, tiny_model_dir, folder)  # the same data: complete, nothing to do
    assert load_artifact(root).contents == first.contents
    edited_folder(folder, tmp_path / "edited", field, value)
    shutil.rmtree(folder)
    (tmp_path / "edited").rename(folder)  # the same folder, the texts unchanged, one question edited
    with pytest.raises(PipelineError, match=r"holds a run with other settings \(questions: ") as caught:
        build_loogle_artifact(out, tiny_model_dir, folder)
    assert "\n" not in str(caught.value) and load_artifact(root).contents == first.contents


def test_other_alignment_settings_are_other_settings(tiny_model_dir, loogle_dir, tmp_path, monkeypatch):
    out = tmp_path / "out"
    build_loogle_artifact(out, tiny_model_dir, loogle_dir)
    monkeypatch.setattr(locating, "FUZZY_RATIO", 0.8)
    with pytest.raises(PipelineError, match=r"other settings \(questions: .*'fuzzy_ratio': 0\.9"):
        build_loogle_artifact(out, tiny_model_dir, loogle_dir)


def test_compare_artifacts_names_other_questions_under_the_same_key_tokens(loogle_artifact, tmp_path):
    root = tmp_path / "replaced"
    shutil.copytree(loogle_artifact, root)
    table = pq.read_table(root / "questions.parquet")
    rows = table.to_pylist()
    rows[0]["answer"] = "another answer"
    pq.write_table(type(table).from_pylist(rows, table.schema), root / "questions.parquet")
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["files"]["questions.parquet"]["sha256"] = file_sha256(root / "questions.parquet")
    (root / "manifest.json").write_text(json.dumps(manifest))  # re-sealed: it loads
    assert load_artifact(root).identity.discrete == load_artifact(loogle_artifact).identity.discrete
    cfg = compose_config("compare_artifacts", [f"a={loogle_artifact}", f"b={root}"])
    with pytest.raises(PipelineError, match=r"not the same artifact: the same key tokens, other questions"):
        compare_artifacts.run(cfg)
    same = compare_artifacts.run(
        compose_config("compare_artifacts", [f"a={loogle_artifact}", f"b={loogle_artifact}"])
    )
    assert same["exact"]
