"""Sharded artifacts (``pipeline.artifact.shards``): `make keytokens shard_rows=N` and ``save_key_tokens``
write each table in shards named as Hub datasets name theirs, cut at document boundaries; the sharded
artifact and its one-file form are the same artifact (fingerprint, discrete hash, contents hash, every
value); a missing, extra or foreign shard is refused, naming the file. The default stays one file per
table."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.api import save_key_tokens
from pipeline.artifact.reader import load_artifact
from pipeline.artifact.schema import TABLES
from pipeline.artifact.writer import write_artifact
from pipeline.commands import compare_artifacts
from pipeline.errors import PipelineError
from pipeline.files import write_table_atomic
from pipeline.provenance import file_sha256
from tests.support import (
    STAGE1_TEXTS,
    compose_config,
    compose_keytokens,
    default_artifact,
    keytokens_overrides,
    run_keytokens,
    table_bytes,
)

SHARD = re.compile(r"(documents|tokens|spans)-(\d{5})-of-(\d{5})\.parquet")


@pytest.fixture
def sharded(sharded_artifact) -> Path:
    return sharded_artifact


def parquet_names(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob("*.parquet"))


def same_artifact(a: Path, b: Path) -> None:
    x, y = load_artifact(a), load_artifact(b)
    assert x.manifest["fingerprint"] == y.manifest["fingerprint"]
    assert x.identity == y.identity and x.identity.discrete == y.identity.discrete
    assert x.contents == y.contents
    for name in TABLES:
        assert getattr(x, name).equals(getattr(y, name)), name


def test_keytokens_writes_shards_of_the_same_artifact(tiny_artifact, tiny_model_dir, tmp_path):
    """`make keytokens shard_rows=150` on the tiny artifact's corpus: each table in 3 shards (each
    document has over 75 tokens: one per shard), the manifest listing every shard with its sha256,
    bytes and rows and recording the cut; the same fingerprint, discrete and contents hashes and
    tables as the one-file form."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": f"doc-{i}", "text": t}) + "\n" for i, t in enumerate(STAGE1_TEXTS))
    )
    run_keytokens(compose_keytokens(keytokens_overrides(tiny_model_dir, corpus, tmp_path, "shard_rows=150")))
    root = tmp_path / "test"
    manifest = json.loads((root / "manifest.json").read_text())
    names = [f"{t}-{i:05d}-of-00003.parquet" for t in TABLES for i in range(3)]
    assert parquet_names(root) == sorted(names) == sorted(manifest["files"])
    for name, record in manifest["files"].items():
        path = root / name
        assert record == {
            "sha256": file_sha256(path),
            "bytes": path.stat().st_size,
            "rows": pq.read_metadata(path).num_rows,
        }
    assert manifest["sharding"] == {"shard_rows": 150, "shards": 3, "documents": [1, 1, 1]}
    assert "shard_rows" not in json.dumps(manifest["settings"])  # no number depends on it
    same_artifact(root, tiny_artifact)


def test_the_default_is_one_file_per_table(tiny_artifact, tmp_path):
    """No setting: the three tables, each one file, no sharding record; written again from the loaded
    tables, the same bytes."""
    manifest = json.loads((tiny_artifact / "manifest.json").read_text())
    assert parquet_names(tiny_artifact) == ["documents.parquet", "spans.parquet", "tokens.parquet"]
    assert sorted(manifest["files"]) == ["documents.parquet", "spans.parquet", "tokens.parquet"]
    assert "sharding" not in manifest
    again = save_key_tokens(load_artifact(tiny_artifact), tmp_path / "again")
    assert table_bytes(again) == table_bytes(tiny_artifact)


def test_shards_hold_whole_documents_and_the_same_ones_in_every_table(sharded):
    """Shard i of every table holds the rows of the same whole documents, in order."""
    manifest = json.loads((sharded / "manifest.json").read_text())
    count = manifest["sharding"]["shards"]
    seen: dict[str, int] = {}
    for i in range(count):
        docs = pq.read_table(sharded / f"documents-{i:05d}-of-{count:05d}.parquet")["doc_id"].to_pylist()
        assert len(docs) == manifest["sharding"]["documents"][i]
        for table in ("tokens", "spans"):
            ids = set(
                pq.read_table(sharded / f"{table}-{i:05d}-of-{count:05d}.parquet")["doc_id"].to_pylist()
            )
            assert ids <= set(docs), (table, i)
        seen |= dict.fromkeys(docs, i)
    assert len(seen) == load_artifact(sharded).documents.num_rows


def test_a_cut_keeps_documents_whole_however_small_the_shards(tiny_artifact, tmp_path):
    """shard_rows below a document's rows: that document has a shard of its own, never split; a large
    shard_rows: one shard (-of-00001), still the same artifact."""
    one = save_key_tokens(load_artifact(tiny_artifact), tmp_path / "one", shard_rows=1)
    assert json.loads((one / "manifest.json").read_text())["sharding"]["documents"] == [1, 1, 1]
    whole = save_key_tokens(load_artifact(tiny_artifact), tmp_path / "whole", shard_rows=10**9)
    assert parquet_names(whole) == [f"{t}-00000-of-00001.parquet" for t in ("documents", "spans", "tokens")]
    same_artifact(whole, tiny_artifact)
    same_artifact(one, tiny_artifact)


def test_written_again_in_another_layout_leaves_no_stale_shard(sharded, tmp_path):
    """An artifact rewritten in place with another cut (or one file per table) removes the shards of the
    earlier layout before its manifest; a Parquet file no artifact writes is refused before writing."""
    root = shutil.copytree(sharded, tmp_path / "copy")
    artifact = load_artifact(root)
    write_artifact(root, artifact)
    assert parquet_names(root) == ["documents.parquet", "spans.parquet", "tokens.parquet"]
    same_artifact(root, sharded)
    (root / "mine.parquet").write_bytes((root / "spans.parquet").read_bytes())
    with pytest.raises(
        PipelineError, match=r"holds mine\.parquet, which is no table of a key-token artifact"
    ):
        write_artifact(root, artifact, shard_rows=150)


def test_compare_artifacts_says_the_two_forms_are_the_same(tiny_artifact, sharded, capsys):
    result = compare_artifacts.run(
        compose_config("compare_artifacts", [f"a={tiny_artifact}", f"b={sharded}"])
    )
    out = capsys.readouterr().out
    assert result["exact"] and "exact contents: equal" in out and "the same artifact: yes" in out
    assert "(3 shards per table (at most 150 rows each))" in out


# ----------------------------------------------------------------------------------------------
# Refused, naming the file (each of these loaded, or failed naming another file, on 803d062)


def rewrite_record(root: Path, name: str) -> None:
    """The manifest's record of ``name`` redone for the file there now (an editor who redid the hashes)."""
    manifest = json.loads((root / "manifest.json").read_text())
    path = root / name
    rows = pq.read_metadata(path).num_rows
    manifest["files"][name] = {"sha256": file_sha256(path), "bytes": path.stat().st_size, "rows": rows}
    (root / "manifest.json").write_text(json.dumps(manifest))


def test_a_missing_shard_is_refused_by_name(sharded, tmp_path):
    root = shutil.copytree(sharded, tmp_path / "a")
    (root / "tokens-00001-of-00003.parquet").unlink()
    with pytest.raises(
        PipelineError, match=r"is missing tokens-00001-of-00003\.parquet \(shard 2 of 3 of its tokens table\)"
    ):
        load_artifact(root)


@pytest.mark.parametrize(
    "extra", ["tokens-00005-of-00003.parquet", "tokens-00000-of-00004.parquet", "x.parquet"]
)
def test_an_extra_table_file_is_refused_by_name(sharded, tiny_artifact, tmp_path, extra):
    """A shard the manifest does not list (of another count, or beyond it), or any other Parquet file,
    beside a sharded artifact and beside a one-file one."""
    for source in (sharded, tiny_artifact):
        root = shutil.copytree(source, tmp_path / source.name, ignore=shutil.ignore_patterns("views"))
        shutil.copyfile(root / sorted(root.glob("tokens*.parquet"))[0].name, root / extra)
        with pytest.raises(
            PipelineError, match=rf"holds {re.escape(extra)}, which its manifest does not list"
        ):
            load_artifact(root)
        shutil.rmtree(root)


def test_a_manifest_listing_a_file_of_no_layout_is_refused(sharded, tmp_path):
    root = shutil.copytree(sharded, tmp_path / "a")
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["files"]["tokens-00003-of-00003.parquet"] = manifest["files"]["tokens-00002-of-00003.parquet"]
    (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        PipelineError, match=r"its manifest lists tokens-00003-of-00003\.parquet, which is no file"
    ):
        load_artifact(root)


def test_a_foreign_shard_is_refused_by_name(sharded, tmp_path):
    """Another shard's file under a shard's name: its sha256 does not match; with the manifest's record
    redone, its rows belong to another shard's documents."""
    root = shutil.copytree(sharded, tmp_path / "a")
    shutil.copyfile(root / "tokens-00000-of-00003.parquet", root / "tokens-00001-of-00003.parquet")
    with pytest.raises(PipelineError, match=r"tokens-00001-of-00003\.parquet does not match the sha256"):
        load_artifact(root)
    rewrite_record(root, "tokens-00001-of-00003.parquet")
    with pytest.raises(
        PipelineError,
        match=r"tokens-00001-of-00003\.parquet holds rows of document 'doc-0', which belongs in "
        r"documents-00000-of-00003\.parquet and its shards: a shard of another artifact",
    ):
        load_artifact(root)


def test_a_shard_of_another_artifact_is_refused_by_name(sharded, tmp_path):
    """A shard of the same name from an artifact of other documents (its ids renamed), hashes redone;
    and a shard of another table under a tokens shard's name."""
    root = shutil.copytree(sharded, tmp_path / "a")
    name = "spans-00002-of-00003.parquet"
    table = pq.read_table(root / name)
    other = table.set_column(0, "doc_id", pa.array(["other-doc"] * table.num_rows, pa.string()))
    write_table_atomic(root / name, other)
    rewrite_record(root, name)
    with pytest.raises(
        PipelineError,
        match=rf"{re.escape(name)} holds rows of document 'other-doc', which the artifact's documents "
        "table does not list",
    ):
        load_artifact(root)
    root = shutil.copytree(sharded, tmp_path / "b")
    shutil.copyfile(root / "spans-00001-of-00003.parquet", root / "tokens-00001-of-00003.parquet")
    rewrite_record(root, "tokens-00001-of-00003.parquet")
    with pytest.raises(PipelineError, match=r"tokens-00001-of-00003\.parquet does not have the schema"):
        load_artifact(root)


def test_a_shard_with_other_rows_than_its_record_is_refused(sharded, tmp_path):
    root = shutil.copytree(sharded, tmp_path / "a")
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["files"]["tokens-00001-of-00003.parquet"]["rows"] += 1
    (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        PipelineError, match=r"tokens-00001-of-00003\.parquet has \d+ rows, its manifest records \d+"
    ):
        load_artifact(root, verify_hashes=False)


def test_a_bad_row_names_its_shard(sharded, tmp_path):
    """A content check's failure names the shard and the row in it, not the row of the whole table."""
    root = shutil.copytree(sharded, tmp_path / "a")
    name = "spans-00001-of-00003.parquet"
    table = pq.read_table(root / name)
    ends = table["char_end"].to_pylist()
    write_table_atomic(root / name, table.set_column(3, "char_end", pa.array([-1, *ends[1:]], pa.int32())))
    rewrite_record(root, name)
    with pytest.raises(PipelineError, match=rf"{re.escape(name)} row 0 \(document 'doc-1'\), column char_"):
        load_artifact(root)


def test_shard_rows_must_be_a_positive_number(tiny_artifact, tmp_path):
    with pytest.raises(PipelineError, match=r"setting shard_rows=0: Input should be greater than 0"):
        save_key_tokens(load_artifact(tiny_artifact), tmp_path / "x", shard_rows=0)
    assert not (tmp_path / "x").exists()


def test_an_artifact_with_questions_shards_its_question_tables_with_its_documents(loogle_artifact, tmp_path):
    """LooGLE's question and evidence tables are cut at the same document boundaries as the others, and
    the identity (with the questions' hash) is the one-file form's."""
    root = save_key_tokens(load_artifact(loogle_artifact), tmp_path / "qa", shard_rows=1)
    manifest = json.loads((root / "manifest.json").read_text())
    count = manifest["sharding"]["shards"]
    assert count == load_artifact(loogle_artifact).documents.num_rows > 1
    assert {f"{t}-{count - 1:05d}-of-{count:05d}.parquet" for t in ("questions", "evidence")} <= set(
        manifest["files"]
    )
    for i in range(count):
        docs = pq.read_table(root / f"documents-{i:05d}-of-{count:05d}.parquet")["doc_id"].to_pylist()
        for table in ("questions", "evidence"):
            ids = pq.read_table(root / f"{table}-{i:05d}-of-{count:05d}.parquet")["doc_id"].to_pylist()
            assert set(ids) <= set(docs), (table, i)
    a, b = load_artifact(root), load_artifact(loogle_artifact)
    assert a.identity == b.identity and a.identity.questions and a.contents == b.contents


def test_the_default_artifact_in_shards_keeps_its_recorded_identity(tmp_path):
    """The default artifact (13 documents) in shards of at most 8,192 rows: its fingerprint 9bb93536f3b2
    and discrete hash aba26b06505a, as recorded, and its contents hash; no document split."""
    source = default_artifact()
    genuine = load_artifact(source)
    root = save_key_tokens(genuine, tmp_path / "default", shard_rows=8192)
    sharded = load_artifact(root)
    assert sharded.manifest["fingerprint"].startswith("9bb93536f3b2")
    assert sharded.identity.discrete.startswith("aba26b06505a")
    assert sharded.identity == genuine.identity and sharded.contents == genuine.contents
    assert sharded.manifest["sharding"]["shards"] > 1 and sum(sharded.manifest["sharding"]["documents"]) == 13
    assert not any(p.name.startswith(("tokens-", "documents-", "spans-")) for p in source.iterdir())
