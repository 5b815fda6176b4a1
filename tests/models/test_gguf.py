"""A GGUF model's cached conversion (``pipeline.models.gguf``): checked by content on use, a damaged one
named as the damaged cache (never blamed on float16 overflow or on the artifact), read once while
whole, never left half-made by a kill, made with the umask's modes; a cache folder that cannot be made
is one line."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.artifact import inputs
from pipeline.artifact.reader import load_artifact
from pipeline.errors import PipelineError
from pipeline.files import umask
from pipeline.models import gguf
from tests.support import ROOT, STAGE1_TEXTS, build_model, one_error, run_cli, swap_two_token_ids


def fake_gguf(path):
    """A file with a valid GGUF header (its contents are read by ``read_gguf``, replaced in tests)."""
    path.write_bytes(gguf.HEADER.pack(gguf.MAGIC, 3, 0, 0) + b"\0" * 64)
    return path


@pytest.fixture
def converted(tmp_path, tokenizer, monkeypatch):
    """A GGUF file's cached conversion (its reading replaced by the tiny model) in LONGPPL_CACHE."""
    monkeypatch.setenv("LONGPPL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(
        gguf, "read_gguf", lambda path: (tokenizer, build_model("llama", len(tokenizer)).float())
    )
    model = fake_gguf(tmp_path / "tiny.gguf")
    folder, _ = gguf.convert_gguf(model)
    return model, folder


def flip_bits(path, at: int, mask: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(at)
        byte = handle.read(1)[0]
        handle.seek(at)
        handle.write(bytes([byte ^ mask]))


@pytest.mark.parametrize("damage", ["low bits", "coarse"])
def test_a_cached_conversion_with_changed_weights_is_named_damaged(converted, damage):
    """The low bit of one weight (PPL 19.8108 for 19.8014, recorded as the model), or a run of weights
    overwritten with NaN (blamed on float16 overflow): the conversion's weights are checked by content
    on use, the stat unchanged or not."""
    model, folder = converted
    weights = folder / "model.safetensors"
    assert gguf.convert_gguf(model)[0] == folder  # whole: taken, and its weights' version recorded
    stat = weights.stat()
    if damage == "low bits":
        flip_bits(weights, weights.stat().st_size - 3, 0x01)
    else:
        with open(weights, "r+b") as handle:
            handle.seek(stat.st_size - 4096)
            handle.write(b"\xff" * 4096)
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the mtime put back
    with pytest.raises(
        PipelineError, match=r"cached GGUF conversion .* is damaged .*model\.safetensors .*sha256"
    ):
        gguf.convert_gguf(model)


@pytest.mark.parametrize("record", ["no files", "no weights"])
def test_a_conversion_whose_record_has_no_hashes_is_refused_not_taken(converted, record):
    """A conversion made before its record held its files' hashes (or whose record names no weight file)
    was taken as it is: with its weights damaged, SmolLM2 scored PPL 19.8080 instead of 19.8014 under
    the genuine result id. Hashing it now would bless the damage, so it is refused, naming the fix;
    deleted, the next load converts the GGUF file again, hashes recorded."""
    model, folder = converted
    source = json.loads((folder / gguf.SOURCE_RECORD).read_text())
    if record == "no files":
        del source["files"]
    else:
        del source["files"]["model.safetensors"]
    (folder / gguf.SOURCE_RECORD).write_text(json.dumps(source))
    weights = folder / "model.safetensors"
    flip_bits(weights, weights.stat().st_size - 3, 0x01)
    with pytest.raises(
        PipelineError,
        match=rf"^the cached GGUF conversion {re.escape(str(folder))} cannot be checked: .* delete that",
    ):
        gguf.convert_gguf(model)
    shutil.rmtree(folder)
    assert gguf.convert_gguf(model)[0] == folder
    assert "model.safetensors" in json.loads((folder / gguf.SOURCE_RECORD).read_text())["files"]


def test_a_whole_conversion_is_read_once_then_known_by_its_version(converted, monkeypatch):
    model, folder = converted
    gguf.convert_gguf(model)  # its weights read and found whole
    reads, sha256 = [], gguf.file_sha256
    monkeypatch.setattr(gguf, "file_sha256", lambda path: reads.append(Path(path).name) or sha256(path))
    assert gguf.convert_gguf(model)[0] == folder and "model.safetensors" not in reads
    os.utime(folder / "model.safetensors")  # a new version (its content the same): read again
    assert gguf.convert_gguf(model)[0] == folder and "model.safetensors" in reads


KILLED_MIDWAY = """
import os, signal, sys
from pipeline.models import gguf
from tests.support import build_model, build_tokenizer
tokenizer = build_tokenizer()
gguf.read_gguf = lambda path: (tokenizer, build_model("llama", len(tokenizer)).float())
gguf.new_file_modes = lambda folder: os.kill(os.getpid(), signal.SIGKILL)  # killed while staging
gguf.convert_gguf(gguf.Path(sys.argv[1]))
"""


def test_a_conversion_killed_midway_leaves_no_staging_folder_for_good(tmp_path, tokenizer, monkeypatch):
    model = fake_gguf(tmp_path / "tiny.gguf")
    env = {
        **os.environ,
        "LONGPPL_CACHE": str(tmp_path / "cache"),
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", KILLED_MIDWAY, str(model)], cwd=ROOT, env=env, capture_output=True, timeout=900
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    left = [p for p in (tmp_path / "cache" / "gguf").iterdir() if p.name.startswith(".tmp-")]
    assert len(left) == 1 and any(left[0].rglob("*.safetensors"))  # what a kill leaves
    monkeypatch.setenv("LONGPPL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(
        gguf, "read_gguf", lambda path: (tokenizer, build_model("llama", len(tokenizer)).float())
    )
    folder, _ = gguf.convert_gguf(model)
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]


def test_a_staging_folder_in_use_is_left_alone(tmp_path):
    with gguf.staging_folder(tmp_path) as held:
        gguf.remove_stale_staging(tmp_path)
        assert held.is_dir()
        unowned = tmp_path / ".tmp-older"
        unowned.mkdir()
        gguf.remove_stale_staging(tmp_path)
        assert unowned.is_dir()  # no owner file, and new: perhaps a conversion starting
        os.utime(unowned, (0, 0))
        gguf.remove_stale_staging(tmp_path)
        assert not unowned.exists() and held.is_dir()
    assert not held.exists()


def test_a_cache_folder_that_cannot_be_made_is_one_line(tmp_path):
    """cache_dir=/proc/self gave a traceback (FileNotFoundError from mkdir)."""
    with pytest.raises(
        PipelineError, match=r"^the pipeline's cache folder /proc/self .* cannot be made or written"
    ):
        gguf.convert_gguf(fake_gguf(tmp_path / "tiny.gguf"), Path("/proc/self"))


def test_a_cache_folder_that_is_a_file(tiny_artifact, tmp_path):
    model = fake_gguf(tmp_path / "m.gguf")
    (tmp_path / "cache").write_text("not a folder")
    done = run_cli(
        "pipeline.commands.score", "model=local", f"model.spec={model}", f"results={tmp_path / 's.jsonl'}",
        f"artifact={tiny_artifact}",
        LONGPPL_CACHE=str(tmp_path / "cache"),
    )  # fmt: skip
    assert one_error(done) == (
        f"error: the pipeline's cache folder {tmp_path / 'cache'} ($LONGPPL_CACHE or cache_dir=) cannot be "
        f"made: {tmp_path / 'cache'} is a file; point LONGPPL_CACHE (or cache_dir=) at a folder"
    )


@pytest.fixture
def conversion(tmp_path, monkeypatch, tokenizer):
    """A GGUF file's cached conversion (the file's reading replaced by the tiny model) in LONGPPL_CACHE."""
    monkeypatch.setenv("LONGPPL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(
        gguf, "read_gguf", lambda path: (tokenizer, build_model("llama", len(tokenizer)).float())
    )
    model = fake_gguf(tmp_path / "tiny.gguf")
    folder, sha = gguf.convert_gguf(model)
    return model, folder, sha


def test_the_cached_conversion_has_the_umask_modes(conversion):
    _, folder, _ = conversion
    mask = 0o666 & ~umask()
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}
    assert modes["model.safetensors"] == mask and set(modes.values()) == {mask}
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~umask()


def test_a_damaged_cached_tokenizer_is_blamed_not_the_artifact(conversion, tiny_artifact):
    """The artifact's evaluator, as if it were this GGUF file: its cached conversion's tokenizer.json
    with two ids swapped is named as the damaged cache (delete it), not as the artifact's fault."""
    model, folder, sha = conversion
    art = load_artifact(tiny_artifact, verify_hashes=False)
    manifest = json.loads(json.dumps(art.manifest))
    manifest["settings"]["evaluator"] = {
        "spec": str(model),
        "kind": "gguf",
        "path": str(model),
        "file_sha256": sha,
    }
    as_gguf = dataclasses.replace(art, manifest=manifest)
    assert inputs.check_now(as_gguf)[0]["tokenizer"] == f"re-tokenised with {model}'s tokenizer"
    swap_two_token_ids(folder / "tokenizer.json", STAGE1_TEXTS[0])
    with pytest.raises(
        PipelineError, match=rf"cached GGUF conversion {folder} is damaged .*: tokenizer\.json is"
    ):
        inputs.check_now(as_gguf)
    with pytest.raises(PipelineError, match=rf"cached GGUF conversion {folder} is damaged"):
        gguf.convert_gguf(model)  # and so is loading the model from it
