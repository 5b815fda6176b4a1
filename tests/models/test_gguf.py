"""A GGUF model's cached conversion (``pipeline.models.gguf``): checked by content on use, a damaged one
named as the damaged cache (never blamed on float16 overflow or on the artifact), read once while
whole, never left half-made by a kill, made with the umask's modes; a cache folder that cannot be made
is one line. A cached conversion holds only what its record names, and a load reads only those files
(``pipeline.models.conversion_view``); a record re-sealed over an edited file is one line."""

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
from pipeline.models import gguf, loading
from pipeline.models.loading import load_model
from pipeline.provenance import file_sha256
from tests.support import ROOT, STAGE1_TEXTS, build_model, one_error, run_cli, swap_two_token_ids


def fake_gguf(path, body: bytes = b"\0" * 64):
    """A file with a valid GGUF header (its contents are read by ``read_gguf``, replaced in tests)."""
    path.write_bytes(gguf.HEADER.pack(gguf.MAGIC, 3, 0, 0) + body)
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


@pytest.fixture
def as_gguf(conversion, tiny_artifact):
    """The tiny artifact as if its evaluator were the converted GGUF file (the same tokenizer)."""
    model, _, sha = conversion
    art = load_artifact(tiny_artifact, verify_hashes=False)
    manifest = json.loads(json.dumps(art.manifest))
    manifest["settings"]["evaluator"] = {
        "spec": str(model),
        "kind": "gguf",
        "path": str(model),
        "file_sha256": sha,
    }
    return dataclasses.replace(art, manifest=manifest)


def test_a_damaged_cached_tokenizer_is_blamed_not_the_artifact(conversion, as_gguf):
    """The artifact's evaluator, as if it were this GGUF file: its cached conversion's tokenizer.json
    with two ids swapped is named as the damaged cache (delete it), not as the artifact's fault."""
    model, folder, _ = conversion
    assert inputs.check_now(as_gguf)[0]["tokenizer"] == f"re-tokenised with {model}'s tokenizer"
    swap_two_token_ids(folder / "tokenizer.json", STAGE1_TEXTS[0])
    with pytest.raises(
        PipelineError, match=rf"cached GGUF conversion {folder} is damaged .*: tokenizer\.json is"
    ):
        inputs.check_now(as_gguf)
    with pytest.raises(PipelineError, match=rf"cached GGUF conversion {folder} is damaged"):
        gguf.convert_gguf(model)  # and so is loading the model from it


# What transformers reads from a checkpoint folder beside the files a conversion writes (an
# ``added_tokens.json`` gave SmolLM2 PPL 39.898 for 27.925 under its genuine record), anything else
# the folder may hold, at any depth, and a recorded file made a link.
UNNAMED = {
    "added_tokens.json": '{"<extra>": 400}',
    "special_tokens_map.json": '{"bos_token": "<eos>"}',
    "chat_template.jinja": "{{ messages }}",
    "additional_chat_templates/extra.jinja": "{{ messages }}",
    ".notes": "a hidden file",
}


@pytest.mark.parametrize("name", UNNAMED)
def test_a_file_the_record_does_not_name_is_refused_naming_it(conversion, name):
    """An extra ``added_tokens.json`` was read (one more token, other numbers, the same result id); an
    extra ``special_tokens_map.json`` was blamed on the tokenizer ("not the model's"). Any file the
    record does not name is refused on use, named, with the fix; deleted, the conversion is whole."""
    model, folder, _ = conversion
    (folder / name).parent.mkdir(exist_ok=True)
    (folder / name).write_text(UNNAMED[name])
    with pytest.raises(
        PipelineError,
        match=rf"^the cached GGUF conversion {re.escape(str(folder))} holds {re.escape(name)}, which its "
        r"longppl-source\.json does not name .*: delete that folder \(the next load converts",
    ):
        load_model(str(model), dtype="float32", device="cpu")
    (folder / name).unlink()
    shutil.rmtree(folder / "additional_chat_templates", ignore_errors=True)
    assert len(load_model(str(model), dtype="float32", device="cpu").tokenizer) == 400


def test_a_recorded_file_made_a_link_or_an_empty_folder_is_refused(conversion, tmp_path):
    model, folder, _ = conversion
    (folder / "empty").mkdir()
    with pytest.raises(PipelineError, match=r"holds empty/, which its longppl-source\.json does not name"):
        gguf.convert_gguf(model)
    (folder / "empty").rmdir()
    elsewhere = tmp_path / "tokenizer.json"
    shutil.copyfile(folder / "tokenizer.json", elsewhere)  # the same bytes
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer.json").symlink_to(elsewhere)
    with pytest.raises(PipelineError, match=r"is damaged .*: tokenizer\.json is missing, not a file"):
        gguf.convert_gguf(model)


def test_the_pipelines_own_records_in_the_folder_are_not_refused(conversion):
    """The weights' version record (``longppl-verified.json``, written on a check) and an atomic write
    of it in progress (another process checking the same conversion)."""
    model, folder, _ = conversion
    gguf.convert_gguf(model)  # checked: the weights' version recorded
    assert (folder / gguf.VERIFIED).is_file()
    (folder / f".{gguf.VERIFIED}.a1b2.tmp").write_text("{}")
    assert gguf.convert_gguf(model)[0] == folder


def test_a_file_that_appears_after_the_check_is_not_read(conversion, monkeypatch):
    """The load reads a view of exactly the recorded files: an ``added_tokens.json`` dropped into the
    conversion between its check and the tokenizer's load is not read (the next use refuses it)."""
    model, folder, _ = conversion
    original = loading.load_tokenizer

    def dropped_in_first(location, cache):
        (folder / "added_tokens.json").write_text(UNNAMED["added_tokens.json"])
        return original(location, cache)

    monkeypatch.setattr(loading, "load_tokenizer", dropped_in_first)
    assert len(load_model(str(model), dtype="float32", device="cpu").tokenizer) == 400
    with pytest.raises(PipelineError, match=r"holds added_tokens\.json"):
        gguf.convert_gguf(model)


def test_a_conversion_in_a_cache_this_process_cannot_write_still_loads(conversion, monkeypatch):
    """Another user's cache (readable, not writable: no staging folder can be made in it): the view is
    made in a temporary folder of the system's."""
    from pipeline.models import conversion_view

    model, _, _ = conversion

    def unwritable(parent):
        raise PermissionError(13, "Permission denied", str(parent))

    monkeypatch.setattr(conversion_view, "staging_folder", unwritable)
    assert len(load_model(str(model), dtype="float32", device="cpu").tokenizer) == 400


def test_weights_changed_while_they_load_are_refused(conversion, monkeypatch):
    model, folder, _ = conversion
    original = loading._from_pretrained

    def touched_after(source, location, kwargs):
        loaded = original(source, location, kwargs)
        os.utime(folder / "model.safetensors")  # a new version of the file, during the load
        return loaded

    monkeypatch.setattr(loading, "_from_pretrained", touched_after)
    with pytest.raises(PipelineError, match=r"is damaged .*: model\.safetensors changed while it was loaded"):
        load_model(str(model), dtype="float32", device="cpu")


def test_a_conversion_of_another_gguf_file_is_refused(conversion, tmp_path, tokenizer):
    """Another GGUF file's conversion copied into this one's folder (its files whole, its record its
    own) was taken for this file: the other model's numbers under this file's sha256."""
    model, folder, _ = conversion
    other, _ = gguf.convert_gguf(fake_gguf(tmp_path / "other.gguf", b"other weights"))
    shutil.rmtree(folder)
    shutil.copytree(other, folder)
    with pytest.raises(
        PipelineError, match=r"is damaged .*: its longppl-source\.json is the record of another GGUF file"
    ):
        gguf.convert_gguf(model)


def test_a_conversion_folder_without_its_record_is_one_line(conversion):
    """It gave a traceback (the new conversion's rename onto a folder that is not empty)."""
    model, folder, _ = conversion
    (folder / gguf.SOURCE_RECORD).unlink()
    with pytest.raises(PipelineError, match=rf"{re.escape(str(folder))} is damaged .*: it has no longppl"):
        gguf.convert_gguf(model)


def reseal(folder, name: str, edit) -> None:
    """``name`` edited and the conversion's record rewritten with its new hash and size."""
    path = folder / name
    path.write_bytes(edit(path.read_bytes()))
    record = json.loads((folder / gguf.SOURCE_RECORD).read_text())
    record["files"][name] = {"sha256": file_sha256(path), "bytes": path.stat().st_size}
    (folder / gguf.SOURCE_RECORD).write_text(json.dumps(record))


RESEALED = {
    "tokenizers' own exception": ("tokenizer.json", lambda data: data.replace(b'"BPE"', b'"Other"')),
    "cut short": ("tokenizer.json", lambda data: data[: len(data) // 2]),
    "safetensors' own exception": ("model.safetensors", lambda data: data[:100]),
}


@pytest.mark.parametrize("case", RESEALED)
def test_a_record_resealed_over_an_edited_file_is_one_line(conversion, case):
    """A file edited and the record rewritten with its new hash passes the record's checks; what then
    fails to read (tokenizers' and safetensors' own exceptions gave tracebacks) names the conversion."""
    model, folder, _ = conversion
    reseal(folder, *RESEALED[case])
    with pytest.raises(
        PipelineError,
        match=rf"^the cached GGUF conversion {re.escape(str(folder))} does not load \(.*\), though its "
        r"files are those its longppl-source\.json names: .* delete that folder",
    ):
        load_model(str(model), dtype="float32", device="cpu")


def test_a_resealed_record_is_one_error_line_from_the_command(conversion, tiny_artifact, tmp_path):
    model, folder, _ = conversion
    reseal(folder, *RESEALED["tokenizers' own exception"])
    done = run_cli(
        "pipeline.commands.score", "model=local", f"model.spec={model}", f"results={tmp_path / 's.jsonl'}",
        f"artifact={tiny_artifact}", "device=cpu",
        LONGPPL_CACHE=str(tmp_path / "cache"),
    )  # fmt: skip
    assert one_error(done).startswith(f"error: the cached GGUF conversion {folder} does not load (Exception:")
    assert not (tmp_path / "s.jsonl").exists()


def test_the_artifact_check_refuses_a_file_the_record_does_not_name(conversion, as_gguf):
    """The evaluator's tokenizer, re-made to check an artifact's tokens, is read from the same view."""
    _, folder, _ = conversion
    (folder / "added_tokens.json").write_text(UNNAMED["added_tokens.json"])
    with pytest.raises(PipelineError, match=rf"conversion {re.escape(str(folder))} holds added_tokens\.json"):
        inputs.check_now(as_gguf)
