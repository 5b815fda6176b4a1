"""GGUF model files: their header checked, then dequantised once into a cached safetensors checkpoint
keyed by the file's sha256, so later loads take seconds instead of a minute.

The conversion records the GGUF file's sha256 and the sha256 of every file it wrote
(``longppl-source.json``, ``files``). A cached conversion holds only what its record names: each use
checks that the record is this GGUF file's, that the folder holds no other file (``unnamed``: an
``added_tokens.json`` dropped in would be read by transformers), and every file against the record,
its weights too (``check_weights``: hashed again whenever their device, inode, size, mtime or ctime
changed since they were last found whole), so a damaged or edited cache is named as such (delete it:
the next load makes it again), never taken for the model or blamed on an artifact; one whose record has
no hashes (made before records had them) cannot be checked and is refused, to be made again. A load
reads only the recorded files (``pipeline.models.conversion_view``). A conversion is staged in a
folder of its own held by a lock; a conversion killed midway leaves it behind, and the next one
removes it. Its files get the mode of any new file (the umask), as every file the pipeline writes."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import stat
import struct
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pipeline.errors import PipelineError
from pipeline.files import nearest_existing, umask
from pipeline.models.weight_hashes import FileHashing
from pipeline.provenance import file_sha256

MAGIC = b"GGUF"
HEADER = struct.Struct("<4sIQQ")  # magic, version, tensor count, metadata count (little-endian)
VERSIONS = (2, 3)  # what the gguf reader transformers uses reads
# What reading a damaged or foreign file raises inside transformers' GGUF reader.
SOURCE_RECORD = "longppl-source.json"  # what a conversion was made from, and the files it wrote
WEIGHTS = (".safetensors", ".bin")
VERIFIED = "longppl-verified.json"  # the weights' hashes by their version (``FileHashing``'s record)
STAGING = ".tmp-"  # a conversion's staging folder in the cache, and its lock file
OWNER = ".owner"
UNOWNED_STAGING_S = 3600
READ_ERRORS = (OSError, ValueError, KeyError, IndexError, EOFError, struct.error, NotImplementedError)


def default_cache_dir() -> Path:
    """Where converted GGUF checkpoints live; ``LONGPPL_CACHE`` overrides it."""
    return Path(os.environ.get("LONGPPL_CACHE", Path.home() / ".cache" / "longppl"))


def usable_cache(cache_dir: Path) -> Path:
    """``cache_dir``, a folder with its ``gguf`` folder made in it: one line when it cannot be (under a
    file, in /proc, not writable)."""
    folder = nearest_existing(cache_dir)
    if not folder.is_dir():
        raise PipelineError(
            f"the pipeline's cache folder {cache_dir} ($LONGPPL_CACHE or cache_dir=) cannot be made: "
            f"{folder} is a file; point LONGPPL_CACHE (or cache_dir=) at a folder"
        )
    try:
        (cache_dir / "gguf").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PipelineError(
            f"the pipeline's cache folder {cache_dir} ($LONGPPL_CACHE or cache_dir=) cannot be made or "
            f"written ({exc.strerror or exc}): point LONGPPL_CACHE (or cache_dir=) at a folder you can write"
        ) from None
    return cache_dir


def gguf_cache_path(gguf: Path, sha: str, cache_dir: Path) -> Path:
    """Where a GGUF file's converted checkpoint is cached (keyed by the file's sha256)."""
    return cache_dir / "gguf" / f"{gguf.stem}-{sha[:16]}"


def check_header(path: Path) -> None:
    """The fixed header of a GGUF file (magic bytes, version, counts that fit the file), read before
    anything else reads the file; a PipelineError says what is wrong with it."""
    with open(path, "rb") as handle:
        head = handle.read(HEADER.size)
    if head[:4] != MAGIC:
        raise PipelineError(
            f"{path} is not a GGUF file (it does not start with the bytes 'GGUF'): pass a .gguf model "
            "file, a checkpoint directory or a Hub id"
        )
    if len(head) < HEADER.size:
        raise PipelineError(
            f"{path}: its GGUF header is cut short ({len(head)} bytes): download the file again"
        )
    _, version, n_tensors, n_values = HEADER.unpack(head)
    if version not in VERSIONS:
        raise PipelineError(
            f"{path}: GGUF version {version}, not one this pipeline reads ({', '.join(map(str, VERSIONS))}): "
            "convert the model with a current llama.cpp, or pass a checkpoint directory"
        )
    size = path.stat().st_size
    if n_tensors > size or n_values > size:
        raise PipelineError(
            f"{path}: its GGUF header claims {n_tensors} tensors and {n_values} metadata entries, more than "
            f"a file of {size} bytes can hold: the file is damaged; download it again"
        )


def convert_gguf(gguf: Path, cache_dir: Path | None = None) -> tuple[Path, str]:
    """Dequantise a GGUF file once into a safetensors checkpoint; returns (directory, file sha256).

    transformers refuses ``save_pretrained`` on a GGUF-loaded model, so a fresh model is built from
    the config and given the dequantised state dict. The directory appears atomically.
    """
    check_header(gguf)
    cache = usable_cache(cache_dir or default_cache_dir())
    sha = file_sha256(gguf)
    target = gguf_cache_path(gguf, sha, cache)
    if (target / SOURCE_RECORD).is_file():
        check_conversion(target, sha)
        return target, sha
    if target.exists():  # a conversion appears whole (a rename), its record in it
        raise PipelineError(f"{damaged(target)}: it has no {SOURCE_RECORD}")
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"converting {gguf.name} to a cached checkpoint in {target} (once; about a minute)", flush=True)
    from transformers import AutoModelForCausalLM  # with the model, not the command (start-up)

    tokenizer, loaded = read_gguf(gguf)
    settings = loaded.config.to_dict()
    settings.pop("quantization_config", None)  # the weights we save are dequantised
    fresh = AutoModelForCausalLM.from_config(type(loaded.config).from_dict(settings), dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict(), strict=True)
    fresh.eval()
    _check_same_outputs(loaded, fresh, gguf.name)
    with staging_folder(target.parent) as tmp:
        staging = tmp / "ckpt"
        fresh.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        written = sorted(p for p in staging.rglob("*") if p.is_file())
        files = {
            p.relative_to(staging).as_posix(): {"sha256": file_sha256(p), "bytes": p.stat().st_size}
            for p in written
        }
        record = {"gguf_file": gguf.name, "gguf_sha256": sha, "files": dict(sorted(files.items()))}
        (staging / SOURCE_RECORD).write_text(json.dumps(record, indent=2))
        new_file_modes(staging)
        try:
            os.replace(staging, target)
        except OSError:  # another process finished first: keep theirs
            if not (target / SOURCE_RECORD).is_file():
                raise
    return target, sha


def new_file_modes(folder: Path) -> None:
    """The folder and its files get the modes of any new ones (0777 / 0666 less the umask): safetensors
    writes its file 0600, which others on a shared machine could not read."""
    mask = umask()
    folder.chmod(0o777 & ~mask)
    for path in folder.iterdir():
        path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)


@dataclass(frozen=True)
class Recorded:
    """A file a conversion's record names: its path inside the folder, its size and sha256."""

    name: str
    size: int
    sha256: str

    @property
    def weights(self) -> bool:
        return Path(self.name).suffix in WEIGHTS


def check_conversion(target: Path, gguf_sha256: str, weights: bool = True) -> None:
    """A cached conversion must still be what it was made as: the conversion of the GGUF file whose
    sha256 is ``gguf_sha256``, holding only the files its record names (``recorded_files``), each of
    them by size and sha256, its weights (unless ``weights`` is False: only its tokenizer is used) by
    ``check_weights``."""
    entries = recorded_files(target, gguf_sha256)
    for entry in entries:
        if not entry.weights and file_sha256(target / entry.name) != entry.sha256:
            raise PipelineError(f"{damaged(target)}: {entry.name} is not the file written when it was made")
    if weights:
        check_weights(target, {e.name: e.sha256 for e in entries if e.weights})


def recorded_files(target: Path, gguf_sha256: str) -> list[Recorded]:
    """The files ``target``'s record names, once the record is known to be the conversion of the GGUF
    file ``gguf_sha256``, to name every file the folder holds (``unnamed``), and each of them a regular
    file of its recorded size. A record with no hashes cannot be checked, and hashing it now would
    bless whatever it holds: refused, to be made again (``unrecorded``)."""
    try:
        record = json.loads((target / SOURCE_RECORD).read_text(encoding="utf-8"))
        made_from = record.get("gguf_sha256")
        files = record.get("files") or {}
        entries = [Recorded(str(name), int(e["bytes"]), str(e["sha256"])) for name, e in files.items()]
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        raise PipelineError(f"{damaged(target)}: its {SOURCE_RECORD} does not read") from None
    if why := unrecorded(target, {entry.name for entry in entries}):
        raise PipelineError(why)
    if made_from != gguf_sha256:
        raise PipelineError(
            f"{damaged(target)}: its {SOURCE_RECORD} is the record of another GGUF file (sha256 "
            f"{str(made_from)[:16]}, not {gguf_sha256[:16]})"
        )
    if extra := unnamed(target, {entry.name for entry in entries}):
        raise PipelineError(
            f"the cached GGUF conversion {target} holds {extra}, which its {SOURCE_RECORD} does not name "
            "(a conversion holds only the files it was made with; transformers reads some, such as "
            "added_tokens.json, as part of the model): delete that folder (the next load converts the GGUF "
            "file again, once)"
        )
    for entry in entries:
        found = (target / entry.name).lstat()
        if not stat.S_ISREG(found.st_mode) or found.st_size != entry.size:
            raise PipelineError(
                f"{damaged(target)}: {entry.name} is missing, not a file or not the size it was written with"
            )
    return entries


def unnamed(target: Path, recorded: set[str]) -> str | None:
    """The first path in ``target`` (any depth, hidden ones too) that is neither a recorded file nor the
    pipeline's own records (``SOURCE_RECORD``, ``VERIFIED`` and an atomic write of it): a file, a link,
    or a folder holding nothing; else None."""
    folders = {parent.as_posix() for name in recorded for parent in Path(name).parents}
    for root, dirs, files in os.walk(target):
        dirs.sort()
        here = Path(root).relative_to(target)
        links = [name for name in dirs if (Path(root) / name).is_symlink()]  # not walked into
        for name in sorted(files + links):
            path = (here / name).as_posix()
            own = path in (SOURCE_RECORD, VERIFIED) or path.startswith(f".{VERIFIED}.")
            if path not in recorded and not own:
                return path
        if not (dirs or files) and here.as_posix() not in folders:
            return here.as_posix() + "/"
    return None


def unrecorded(target: Path, recorded: set[str]) -> str | None:
    """Why a conversion cannot be checked: its record names no file (a record from before the hashes),
    or a weight file it holds is not in the record (transformers would load it unchecked); else None."""
    weights = sorted(p.name for p in target.iterdir() if p.suffix in WEIGHTS and not p.name.startswith("."))
    missing = [name for name in weights if name not in recorded]
    if recorded and not missing and any(Path(name).suffix in WEIGHTS for name in recorded):
        return None
    what = f"names no hash of {missing[0]}" if recorded and missing else "holds no hashes of its files"
    return (
        f"the cached GGUF conversion {target} cannot be checked: its {SOURCE_RECORD} {what} (a conversion "
        "made before records had them), so damaged weights would pass for the model: delete that folder "
        "(the next load converts the GGUF file again, once)"
    )


def check_weights(target: Path, recorded: dict[str, str]) -> None:
    """Each weight file's sha256 against ``recorded`` (its sha256 when written), read again unless
    ``VERIFIED`` (a ``FileHashing`` record) holds its hash for the version it has now: a changed bit
    anywhere is an error. Measured (2 shared cores): SmolLM2-135M's 0.54 GB read in 0.43 to 0.97 s,
    Gemma 3 270M's 1.07 GB in 0.83 s; a stat (0.004 to 0.03 s) otherwise."""
    files = {name: target / name for name in recorded}
    found = FileHashing(files, target / VERIFIED, hash_file=lambda path: file_sha256(path)).result()
    for name, sha in recorded.items():
        if found[name] != sha:
            raise PipelineError(
                f"{damaged(target)}: {name} is not the file written when it was made (its sha256 differs)"
            )


@contextlib.contextmanager
def staging_folder(parent: Path) -> Iterator[Path]:
    """A new folder in ``parent`` to stage a conversion in, held by a lock on its ``OWNER`` file while
    in use and removed after; first, any staging folder left by a conversion killed midway goes."""
    parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(parent)
    folder = Path(tempfile.mkdtemp(dir=parent, prefix=STAGING))
    fd = os.open(folder / ".owner-new", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.replace(folder / ".owner-new", folder / OWNER)  # seen by others only once held
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(fd)


def remove_stale_staging(parent: Path) -> None:
    """Remove the staging folders in ``parent`` that no live conversion holds: their ``OWNER`` file
    is not locked, or (a folder an older version staged in) there is none and it is an hour old."""
    for folder in parent.glob(STAGING + "*"):
        try:
            fd = os.open(folder / OWNER, os.O_RDWR)
        except FileNotFoundError:
            with contextlib.suppress(OSError):
                if time.time() - folder.stat().st_mtime > UNOWNED_STAGING_S:
                    shutil.rmtree(folder, ignore_errors=True)
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: a conversion is running
        finally:
            os.close(fd)  # a lock taken here goes with it
        shutil.rmtree(folder, ignore_errors=True)


def damaged(target: Path) -> str:
    return f"the cached GGUF conversion {target} is damaged (delete that folder: the next load makes it anew)"


def read_gguf(gguf: Path) -> tuple[Any, Any]:
    """The tokenizer and the (dequantised, float32) model of a GGUF file, through transformers."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
    except READ_ERRORS as exc:
        detail = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise PipelineError(f"could not read the GGUF file {gguf}: {detail}") from None
    return tokenizer, model


def _check_same_outputs(reference: Any, candidate: Any, name: str) -> None:
    probe = (torch.arange(16) * 7919 % reference.config.vocab_size)[None]
    with torch.inference_mode():
        diff = (reference(input_ids=probe).logits - candidate(input_ids=probe).logits).abs().max().item()
    if diff > 1e-4:
        raise PipelineError(
            f"converting {name} changed the model's outputs (max logit difference {diff:.2e})"
        )
