"""The sha256 of weight files, each read once per version of the file in a process, off the load's
critical path.

Hashing 16 GB at about 1.1 GB/s takes 8 to 15 s, as long as loading the weights. Two things keep its cost
down without weakening what is recorded (every file's full sha256):

- the files are hashed in threads (hashlib releases the GIL on large blocks), so a local checkpoint's
  weights are hashed while the model loads (``local_weight_hashing``);
- a file is read once per version (``file_version``: device, inode, size, mtime and ctime in
  nanoseconds) in a process (``HASHED``): a file whose version is unchanged since this process hashed
  it is not read again. The ctime cannot be set from user space, so rewriting a file and restoring its
  mtime still changes the version.

A local checkpoint's hashes are its identity in every results line, so they are never taken from a file
on disk: a record in the cache folder is a claim anyone who can write that folder could forge (one
checkpoint's numbers under another's weights hashes), so each process hashes the weights it loads. A
cached GGUF conversion's weights, whose identity is the GGUF file's own sha256 (hashed on every use),
are checked against the hashes they were written with through a ``FileHashing`` record kept in the
conversion's folder (``pipeline.models.gguf.check_weights``), which spares their reading across runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from pipeline.files import write_json_atomic
from pipeline.models.identity import WEIGHT_SUFFIXES, ModelSource
from pipeline.provenance import file_sha256

MAX_THREADS = 8
# The files this process hashed: real path -> (version, sha256); a local checkpoint's weights are taken
# without a read from here only.
HASHED: dict[str, tuple[str, str]] = {}


def file_version(path: Path) -> str:
    """One version of a file, told without reading it: device, inode, size, mtime and ctime (ns); the
    ctime cannot be set from user space, so a rewrite that restores the mtime still changes it."""
    s = path.stat()
    return f"{s.st_dev}:{s.st_ino}:{s.st_size}:{s.st_mtime_ns}:{s.st_ctime_ns}"


def weight_files(directory: Path) -> list[Path]:
    return [p for p in sorted(directory.iterdir()) if p.suffix in WEIGHT_SUFFIXES]


class HashRecord:
    """A JSON file of hashed files: real path -> {"stat": version, "sha256": hex} (None: no record,
    every file is hashed)."""

    def __init__(self, path: Path | None):
        self.path = path

    def read(self) -> dict[str, dict[str, str]]:
        """path -> {"stat": key, "sha256": hex}; an unreadable or foreign record is an empty one."""
        if self.path is None or not self.path.is_file():
            return {}
        try:
            record = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(record, dict):
            return {}
        return {
            k: v
            for k, v in record.items()
            if isinstance(v, dict) and isinstance(v.get("stat"), str) and isinstance(v.get("sha256"), str)
        }

    def add(self, found: dict[str, dict[str, str]]) -> None:
        """Merge newly hashed files into the record (best effort: a cache that cannot be written
        costs a rehash next time, never a wrong hash)."""
        if self.path is None or not found:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.path, {**self.read(), **found})
        except OSError:
            pass


class FileHashing:
    """The sha256 of ``files`` (name -> path), those this process has not hashed at their version (and,
    given a ``record``, that it holds no matching entry for) computed in threads from construction on
    (by ``hash_file``, default ``file_sha256``); ``result()`` waits for them: {name: sha256}."""

    def __init__(
        self, files: dict[str, Path], record: Path | None, hash_file: Callable[[Path], str] | None = None
    ):
        self.record = HashRecord(record)
        known = self.record.read()
        self.hash_file = hash_file or file_sha256
        self.files = {name: path.resolve() for name, path in files.items()}
        self.keys = {name: file_version(p) for name, p in self.files.items()}
        self.done: dict[str, str] = {}
        todo = []
        for name, path in self.files.items():
            entry = known.get(str(path)) or {}
            hashed = HASHED.get(str(path), (entry.get("stat"), entry.get("sha256")))
            if hashed[0] == self.keys[name]:
                self.done[name] = hashed[1]
            else:
                todo.append(name)
        self.pool = ThreadPoolExecutor(max_workers=max(1, min(len(todo), MAX_THREADS)))
        self.pending: dict[str, Future] = {n: self.pool.submit(self.hash_file, self.files[n]) for n in todo}

    def result(self) -> dict[str, str]:
        new = {name: future.result() for name, future in self.pending.items()}
        self.pool.shutdown()
        # A file changed while it was read is hashed again rather than recorded under a stale key.
        changed = [n for n in new if file_version(self.files[n]) != self.keys[n]]
        for name in changed:
            new[name] = self.hash_file(self.files[name])
        stable = {n: h for n, h in new.items() if n not in changed}
        HASHED.update({str(self.files[n]): (self.keys[n], h) for n, h in stable.items()})
        self.record.add({str(self.files[n]): {"stat": self.keys[n], "sha256": h} for n, h in stable.items()})
        return dict(sorted({**self.done, **new}.items()))

    def cancel(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class WeightHashing(FileHashing):
    """The weight files of a checkpoint folder, hashed once per version in this process and never taken
    from a record on disk (they are the checkpoint's identity)."""

    def __init__(self, directory: Path):
        super().__init__({p.name: p for p in weight_files(directory)}, None)


def local_weight_hashing(source: ModelSource) -> WeightHashing | None:
    """A local checkpoint's weight files hashed beside its load (None for any other source)."""
    if source.kind != "local":
        return None
    return WeightHashing(Path(source.path))
