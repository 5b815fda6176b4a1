"""A local checkpoint's weight hashes: computed beside the run, reused in a process only for an
unchanged file, never taken from a record on disk (they are the checkpoint's identity), checked when
the run records them."""

from __future__ import annotations

import json
import os
import threading

import pytest

from pipeline.models import weight_hashes
from pipeline.models.identity import ModelSource
from pipeline.models.loading import load_model
from pipeline.models.weight_hashes import (
    FileHashing,
    WeightHashing,
    WeightsChanged,
    file_version,
    local_weight_hashing,
)
from pipeline.provenance import file_sha256
from tests.support import save_tiny_model


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


def test_hashes_are_the_files_sha256_and_reused_in_the_process_when_unchanged(tmp_path, monkeypatch):
    folder = checkpoint(tmp_path)
    calls = counting(monkeypatch)
    first = WeightHashing(folder).result()
    expected = {p.name: file_sha256(p) for p in sorted(folder.glob("*.safetensors"))}
    assert first == expected and len(calls) == 2
    assert WeightHashing(folder).result() == expected and len(calls) == 2  # nothing read again
    monkeypatch.setattr(weight_hashes, "HASHED", {})  # another process: read again
    assert WeightHashing(folder).result() == expected and len(calls) == 4


def test_a_rewritten_file_is_hashed_again_even_with_its_mtime_restored(tmp_path, monkeypatch):
    folder = checkpoint(tmp_path)
    WeightHashing(folder).result()
    shard = folder / "model-00001-of-00002.safetensors"
    before = shard.stat()
    shard.write_bytes(b"c" * 5000)  # same size
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))  # same mtime; the ctime moves on
    calls = counting(monkeypatch)
    again = WeightHashing(folder).result()
    assert again[shard.name] == file_sha256(shard) and calls == [shard.resolve()]


def test_an_unreadable_record_or_one_that_cannot_be_written_costs_a_rehash_never_a_wrong_hash(tmp_path):
    """A ``FileHashing`` record (a GGUF conversion's): torn, or in a folder that cannot be made."""
    folder = checkpoint(tmp_path)
    files = {p.name: p for p in folder.glob("*.safetensors")}
    expected = {name: file_sha256(path) for name, path in sorted(files.items())}
    (tmp_path / "record.json").write_text("[1, 2")  # torn
    assert FileHashing(files, tmp_path / "record.json").result() == expected
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    assert FileHashing(files, blocked / "record.json").result() == expected


def test_only_local_checkpoints_are_hashed_beside_the_load(tmp_path):
    folder = checkpoint(tmp_path)
    local = ModelSource(spec=str(folder), kind="local", path=str(folder))
    assert local_weight_hashing(local).result().keys() == {
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    }
    assert local_weight_hashing(ModelSource(spec="x/y", kind="hub", path="x/y")) is None


def test_a_forged_record_in_the_cache_folder_is_never_taken(tmp_path, tokenizer, monkeypatch):
    """The cache folder's ``weight-hashes.json`` (as 803d062 wrote it: real path -> the file's version
    and a sha256) gave a checkpoint whatever sha256 it held for the version the file has: one
    checkpoint's numbers under another's weights hashes. Each process now hashes the weights it loads."""
    folder = save_tiny_model(tmp_path / "model", tokenizer, seed=3)
    weights = (folder / "model.safetensors").resolve()
    forged = {str(weights): {"stat": file_version(weights), "sha256": "f" * 64}}
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "weight-hashes.json").write_text(json.dumps(forged))
    monkeypatch.setattr(weight_hashes, "HASHED", {}, raising=False)  # a new process
    loaded = load_model(str(folder), dtype="float64", device="cpu", cache_dir=cache)
    assert loaded.source.to_dict()["weights_sha256"] == {"model.safetensors": file_sha256(weights)}


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
    hashes and keeps them for the process; a later run in it knows them without a read."""
    folder, gate = checkpoint(tmp_path), threading.Event()
    ended = gated(monkeypatch, gate)
    hashing = WeightHashing(folder)
    now = hashing.provisional()
    assert not ended and all(v.startswith(weight_hashes.UNHASHED) for v in now.values())
    gate.set()
    expected = {p.name: file_sha256(p) for p in sorted(folder.glob("*.safetensors"))}
    assert hashing.confirmed() == expected
    assert WeightHashing(folder).provisional() == expected  # known: hashed in this process


def test_weights_other_than_an_earlier_run_recorded_stop_the_run_when_hashed(tmp_path, monkeypatch):
    folder = checkpoint(tmp_path)
    monkeypatch.setattr(weight_hashes, "file_sha256", lambda path, *args: "0" * 64)
    hashing = WeightHashing(folder)
    earlier = {p.name: "a" * 64 for p in folder.glob("*.safetensors")}
    assert hashing.provisional(earlier, "out/run.json") == earlier  # taken as said, checked later
    with pytest.raises(
        WeightsChanged, match=r"sha256 000000000000\.\.\., not the aaaaaaaaaaaa\.\.\. that out/run\.json"
    ):
        hashing.confirmed()


def test_a_weight_file_changed_after_the_load_stops_the_run(tmp_path):
    folder = checkpoint(tmp_path)
    hashing = WeightHashing(folder)
    shard = folder / "model-00001-of-00002.safetensors"
    shard.write_bytes(b"c" * 5000)
    with pytest.raises(WeightsChanged, match="changed while the run used it"):
        hashing.confirmed()
    assert str(shard.resolve()) not in weight_hashes.HASHED  # nothing kept


def test_a_marker_an_earlier_run_recorded_is_the_same_file_while_its_version_stays(tmp_path):
    folder = checkpoint(tmp_path)
    first = WeightHashing(folder).provisional()
    assert WeightHashing(folder).provisional(first) == first
    shard = folder / "model-00001-of-00002.safetensors"
    shard.write_bytes(b"c" * 5000)
    assert WeightHashing(folder).provisional(first)[shard.name] != first[shard.name]
