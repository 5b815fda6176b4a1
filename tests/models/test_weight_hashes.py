"""A local checkpoint's weight hashes: computed beside the run, reused only for an unchanged file, checked
when the run records them."""

from __future__ import annotations

import os
import threading

import pytest

from pipeline.models import weight_hashes
from pipeline.models.identity import ModelSource
from pipeline.models.weight_hashes import RECORD, WeightHashing, WeightsChanged, local_weight_hashing
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


def gated(monkeypatch, gate, timeout: float = 5.0) -> list:
    """``file_sha256`` held until ``gate`` is set (at most ``timeout`` s); each file's end appended."""
    ended = []

    def held(path, *args):
        gate.wait(timeout)
        ended.append(path)
        return file_sha256(path, *args)

    monkeypatch.setattr(weight_hashes, "file_sha256", held)
    return ended


def test_a_run_names_its_weights_by_version_until_they_are_hashed(tmp_path, monkeypatch):
    """``provisional`` answers at once (a file being hashed by its version), ``confirmed`` waits for the
    hashes and records them; the next run knows them from the record."""
    folder, cache, gate = checkpoint(tmp_path), tmp_path / "cache", threading.Event()
    ended = gated(monkeypatch, gate)
    hashing = WeightHashing(folder, cache)
    now = hashing.provisional()
    assert not ended and all(v.startswith(weight_hashes.UNHASHED) for v in now.values())
    gate.set()
    expected = {p.name: file_sha256(p) for p in sorted(folder.glob("*.safetensors"))}
    assert hashing.confirmed() == expected
    assert WeightHashing(folder, cache).provisional() == expected  # known: the record's


def test_weights_other_than_an_earlier_run_recorded_stop_the_run_when_hashed(tmp_path, monkeypatch):
    folder = checkpoint(tmp_path)
    monkeypatch.setattr(weight_hashes, "file_sha256", lambda path, *args: "0" * 64)
    hashing = WeightHashing(folder, tmp_path / "cache")
    earlier = {p.name: "a" * 64 for p in folder.glob("*.safetensors")}
    assert hashing.provisional(earlier, "out/run.json") == earlier  # taken as said, checked later
    with pytest.raises(
        WeightsChanged, match=r"sha256 000000000000\.\.\., not the aaaaaaaaaaaa\.\.\. that out/run\.json"
    ):
        hashing.confirmed()


def test_a_weight_file_changed_after_the_load_stops_the_run(tmp_path):
    folder = checkpoint(tmp_path)
    hashing = WeightHashing(folder, tmp_path / "cache")
    shard = folder / "model-00001-of-00002.safetensors"
    shard.write_bytes(b"c" * 5000)
    with pytest.raises(WeightsChanged, match="changed while the run used it"):
        hashing.confirmed()
    assert not (tmp_path / "cache" / RECORD).exists()  # nothing recorded


def test_a_marker_an_earlier_run_recorded_is_the_same_file_while_its_version_stays(tmp_path):
    folder = checkpoint(tmp_path)
    first = WeightHashing(folder, tmp_path / "a").provisional()
    assert WeightHashing(folder, tmp_path / "b").provisional(first) == first
    shard = folder / "model-00001-of-00002.safetensors"
    shard.write_bytes(b"c" * 5000)
    assert WeightHashing(folder, tmp_path / "c").provisional(first)[shard.name] != first[shard.name]
