"""Corpus loading: JSONL, Parquet, and the Hub code path on a local dataset folder (offline)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.corpus import CorpusSpec, load_corpus
from pipeline.errors import PipelineError
from pipeline.provenance import text_sha256
from tests.conftest import ROOT

TEXTS = ["CRLF\r\nline", "NUL \x00 inside", "emoji 👩‍👩‍👧 CJK 中文 e\u0301"]


def test_shipped_sample_matches_its_recorded_hashes():
    import json

    rows = [json.loads(line) for line in (ROOT / "data/govreport-sample.jsonl").open(encoding="utf-8")]
    docs = load_corpus(CorpusSpec(name="s", path=str(ROOT / "data/govreport-sample.jsonl")))
    assert len(docs) == 13
    for doc, row in zip(docs, rows, strict=True):
        assert doc.sha256 == row["sha256"] == text_sha256(row["text"]) and len(doc.text) == row["n_chars"]


def test_jsonl_keeps_texts_exactly(write_corpus):
    docs = load_corpus(
        CorpusSpec(name="c", path=str(write_corpus([{"id": i, "text": t} for i, t in enumerate(TEXTS)])))
    )
    assert [d.text for d in docs] == TEXTS and [d.id for d in docs] == ["0", "1", "2"]


def test_parquet_without_id_column_numbers_rows(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"body": TEXTS}), path)
    docs = load_corpus(CorpusSpec(name="mine", path=str(path), text_field="body"))
    assert [d.id for d in docs] == ["mine-00000", "mine-00001", "mine-00002"] and docs[2].text == TEXTS[2]


def test_hub_code_path_on_a_local_dataset_folder(tmp_path):
    folder = tmp_path / "dataset"
    folder.mkdir()
    pq.write_table(pa.table({"report": TEXTS}), folder / "test.parquet")
    spec = CorpusSpec(name="hub", dataset=str(folder), split="test", text_field="report", id_field=None)
    assert not spec.needs_network
    assert [d.text for d in load_corpus(spec)] == TEXTS


def test_unreachable_hub_dataset_names_the_fix(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(PipelineError, match=r"corpus=local corpus\.path"):
        load_corpus(CorpusSpec(name="hub", dataset="org/not-here"))


def test_not_a_json_object_per_line(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "a"}\n[1, 2]\n')
    with pytest.raises(PipelineError, match="line 2: expected a JSON object"):
        load_corpus(CorpusSpec(name="c", path=str(path)))
