"""The sha256 of a local checkpoint's weight files, recorded for provenance, off the load's critical path.

Hashing 16 GB at about 1.1 GB/s takes 8 to 15 s, as long as loading the weights. Two things take it off
the start-up without weakening what is recorded (every file's full sha256):

- a record per file in the cache folder (``weight-hashes.json``), keyed by the file's real path and its
  device, inode, size, mtime and ctime in nanoseconds: a file whose stat is unchanged since it was
  hashed is not read again. The ctime cannot be set from user space, so rewriting a file and
  restoring its mtime still changes the key;
- the files without such a record are hashed in threads while the model loads (``WeightHashing``);
  hashlib releases the GIL on large blocks, so the threads run beside the load.
"""

from __future__ import annotations

import json
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from pipeline.files import write_json_atomic
from pipeline.models.gguf import default_cache_dir, file_version
from pipeline.models.sources import WEIGHT_SUFFIXES, ModelSource
from pipeline.provenance import file_sha256

RECORD = "weight-hashes.json"
MAX_THREADS = 8


def weight_files(directory: Path) -> list[Path]:
    return [p for p in sorted(directory.iterdir()) if p.suffix in WEIGHT_SUFFIXES]


class WeightHashes:
    """The record of hashed files in ``cache_dir`` (None: no record, every file is hashed)."""

    def __init__(self, cache_dir: Path | None):
        self.path = None if cache_dir is None else cache_dir / RECORD

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


class WeightHashing:
    """The weight files' hashes of ``directory``, computed in threads from construction on;
    ``result()`` waits for them: {file name: sha256}."""

    def __init__(self, directory: Path, cache_dir: Path | None):
        self.record = WeightHashes(cache_dir)
        known = self.record.read()
        self.files = {p.name: p.resolve() for p in weight_files(directory)}
        self.keys = {name: file_version(p) for name, p in self.files.items()}
        self.done: dict[str, str] = {}
        todo = []
        for name, path in self.files.items():
            entry = known.get(str(path))
            if entry is not None and entry["stat"] == self.keys[name]:
                self.done[name] = entry["sha256"]
            else:
                todo.append(name)
        self.pool = ThreadPoolExecutor(max_workers=max(1, min(len(todo), MAX_THREADS)))
        self.pending: dict[str, Future] = {n: self.pool.submit(file_sha256, self.files[n]) for n in todo}

    def result(self) -> dict[str, str]:
        new = {name: future.result() for name, future in self.pending.items()}
        self.pool.shutdown()
        # A file changed while it was read is hashed again rather than recorded under a stale key.
        changed = [n for n in new if file_version(self.files[n]) != self.keys[n]]
        for name in changed:
            new[name] = file_sha256(self.files[name])
        stable = {n: h for n, h in new.items() if n not in changed}
        self.record.add({str(self.files[n]): {"stat": self.keys[n], "sha256": h} for n, h in stable.items()})
        return dict(sorted({**self.done, **new}.items()))

    def cancel(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def local_weight_hashing(source: ModelSource, cache_dir: str | Path | None) -> WeightHashing | None:
    """A local checkpoint's weight files hashed beside its load (None for any other source), in the
    record of ``cache_dir`` (the GGUF cache folder's default when None)."""
    if source.kind != "local":
        return None
    return WeightHashing(Path(source.path), Path(cache_dir) if cache_dir else default_cache_dir())
