"""A local checkpoint's weight hashes: computed beside the load, reused only for an unchanged file."""

from __future__ import annotations

import os

from pipeline.models import weight_hashes
from pipeline.models.identity import ModelSource
from pipeline.models.weight_hashes import RECORD, WeightHashing, local_weight_hashing
from pipeline.provenance import file_sha256


def checkpoint(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model-00001-of-00002.safetensors").write_bytes(b"a" * 5000)
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"b" * 7000)
    (folder / "config.json").write_text("{}")
    return folder


def counting(monkeypatch) -> list:
    calls = []

    def counted(path, *args):
        calls.append(path)
        return file_sha256(path, *args)

    monkeypatch.setattr(weight_hashes, "file_sha256", counted)
    return calls


def test_hashes_are_the_files_sha256_and_reused_when_unchanged(tmp_path, monkeypatch):
    folder, cache = checkpoint(tmp_path), tmp_path / "cache"
    calls = counting(monkeypatch)
    first = WeightHashing(folder, cache).result()
    expected = {p.name: file_sha256(p) for p in sorted(folder.glob("*.safetensors"))}
    assert first == expected and len(calls) == 2 and (cache / RECORD).is_file()
    assert WeightHashing(folder, cache).result() == expected and len(calls) == 2  # nothing read again


def test_a_rewritten_file_is_hashed_again_even_with_its_mtime_restored(tmp_path, monkeypatch):
    folder, cache = checkpoint(tmp_path), tmp_path / "cache"
    WeightHashing(folder, cache).result()
    shard = folder / "model-00001-of-00002.safetensors"
    before = shard.stat()
    shard.write_bytes(b"c" * 5000)  # same size
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))  # same mtime; the ctime moves on
    calls = counting(monkeypatch)
    again = WeightHashing(folder, cache).result()
    assert again[shard.name] == file_sha256(shard) and calls == [shard.resolve()]


def test_an_unreadable_record_or_cache_costs_a_rehash_never_a_wrong_hash(tmp_path):
    folder, cache = checkpoint(tmp_path), tmp_path / "cache"
    cache.mkdir()
    (cache / RECORD).write_text("[1, 2")  # torn
    expected = {p.name: file_sha256(p) for p in sorted(folder.glob("*.safetensors"))}
    assert WeightHashing(folder, cache).result() == expected
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    assert WeightHashing(folder, blocked / "cache").result() == expected


def test_only_local_checkpoints_are_hashed_beside_the_load(tmp_path):
    folder = checkpoint(tmp_path)
    local = ModelSource(spec=str(folder), kind="local", path=str(folder))
    assert local_weight_hashing(local, tmp_path / "cache").result().keys() == {
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    }
    assert local_weight_hashing(ModelSource(spec="x/y", kind="hub", path="x/y"), None) is None
