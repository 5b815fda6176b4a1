"""The sha256 of weight files, each read once per version of the file in a process, beside the run,
never before it.

Hashing 16 GB at about 1.1 GB/s takes 8 to 15 s, as long as loading the weights. Three things keep its cost
off the start-up without weakening what is recorded (every file's full sha256):

- the files are hashed in threads (hashlib releases the GIL on large blocks), so a local checkpoint's
  weights are hashed while the model loads (``local_weight_hashing``);
- a file is read once per version (``file_version``: device, inode, size, mtime and ctime in
  nanoseconds) in a process (``HASHED``): a file whose version is unchanged since this process hashed
  it is not read again. The ctime cannot be set from user space, so rewriting a file and restoring its
  mtime still changes the version;
- a local checkpoint's hashes are waited for only where a run records them (``WeightHashing.confirmed``:
  at the end of stage 1, before its manifest; when a results line is made), not at the load: the texts
  are computed meanwhile. Until then a file is known by its version (``provisional``), or by the hash an
  earlier run on the same outputs recorded for it, checked once the hashes are in; a file changed since
  the load, or whose hash is not the one expected, stops the run there (``WeightsChanged``) before it
  records anything.

A local checkpoint's hashes are its identity in every results line, so they are never taken from a file
on disk: a record in the cache folder is a claim anyone who can write that folder could forge (one
checkpoint's numbers under another's weights hashes), so each process hashes the weights it loads. A
cached GGUF conversion's weights, whose identity is the GGUF file's own sha256 (hashed on every use),
are checked against the hashes they were written with through a ``FileHashing`` record kept in the
conversion's folder (``pipeline.models.gguf.check_weights``), which spares their reading across runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.files import write_json_atomic
from pipeline.models.identity import WEIGHT_SUFFIXES, ModelSource
from pipeline.provenance import file_sha256

MAX_THREADS = 8
UNHASHED = "unhashed "  # a file not hashed yet, by its version: "unhashed <inode>:<size>:<mtime>:<ctime>"
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


class WeightsChanged(PipelineError):
    """A checkpoint's weights are not those a run computed with: a file changed after the load, or its
    hash is not the one the run's outputs recorded."""


class WeightHashing(FileHashing):
    """The weight files of a checkpoint folder, hashed once per version in this process and never taken
    from a record on disk (they are the checkpoint's identity), beside the run: ``provisional`` without
    waiting, ``confirmed`` at the end."""

    def __init__(self, directory: Path):
        super().__init__({p.name: p for p in weight_files(directory)}, None)
        self.expected: dict[str, str] = {}
        self.where = ""

    def marker(self, name: str) -> str:
        """A file not hashed yet, by its version (without the device, which another node of a cluster
        numbers otherwise for the same shared file)."""
        return UNHASHED + self.keys[name].split(":", 1)[1]

    def provisional(self, recorded: Mapping[str, str] | None = None, where: str = "") -> dict[str, str]:
        """Each file's identity now, without waiting: its sha256 where it is known (the record), else the
        one an earlier run recorded in ``recorded`` (``where``: that run's record; checked by
        ``confirmed``), else its marker. A marker in ``recorded`` that names the file's present version
        is kept (the same file that run read)."""
        recorded = recorded or {}
        found = {}
        for name in self.files:
            before = recorded.get(name)
            if before == self.marker(name):
                found[name] = before
            elif name in self.done:
                found[name] = self.done[name]
            elif isinstance(before, str) and len(before) == 64 and not before.startswith(UNHASHED):
                found[name] = self.expected[name] = before
            else:
                found[name] = self.marker(name)
        self.where = where
        return dict(sorted(found.items()))

    def confirmed(self) -> dict[str, str]:
        """The files' sha256 once every thread is done (kept for this process), after checking that no
        file changed since the load and that each expected hash is the one found; else
        ``WeightsChanged``."""
        new = {name: future.result() for name, future in self.pending.items()}
        self.pool.shutdown()
        changed = sorted(n for n, p in self.files.items() if file_version(p) != self.keys[n])
        if changed:
            raise WeightsChanged(
                f"the weight file {self.files[changed[0]]} changed while the run used it (its size, mtime "
                "or ctime moved since the model was loaded): nothing is recorded; run again once it stays put"
            )
        HASHED.update({str(self.files[n]): (self.keys[n], h) for n, h in new.items()})
        found = dict(sorted({**self.done, **new}.items()))
        wrong = sorted(n for n, h in self.expected.items() if found[n] != h)
        if wrong:
            name = wrong[0]
            raise WeightsChanged(
                f"the weight file {self.files[name]} has sha256 {found[name][:12]}..., not the "
                f"{self.expected[name][:12]}... that {self.where or 'this run'} recorded for it: these are "
                "other weights, so nothing is recorded; write elsewhere (name=<new name>) or delete that "
                "run's outputs to start over"
            )
        return found


def local_weight_hashing(source: ModelSource) -> WeightHashing | None:
    """A local checkpoint's weight files hashed beside its load (None for any other source)."""
    if source.kind != "local":
        return None
    return WeightHashing(Path(source.path))
