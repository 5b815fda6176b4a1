"""An exclusive lock on an output directory, so that two runs never write into it at once.

A kernel lock (``filelock.FileLock``, flock(2)) on a hidden file beside the directory,
``.<name>.lock``: the kernel drops it when its holder exits, however it exits (SIGKILL, out of
memory, a lost node), so a killed run leaves no stale lock and the next run takes it at once. The
holder writes who it is (host, pid, start time, command) into the lock file; a refused run quotes it.
The file stays after release (unlinking a lock file breaks mutual exclusion); its contents then name
the last holder, which matters to nobody: the kernel lock alone decides.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from errno import ENOSYS
from pathlib import Path

from filelock import FileLock, Timeout

from pipeline.errors import PipelineError


def lock_path(directory: Path) -> Path:
    """The lock file of ``directory``: ``.<name>.lock`` beside it."""
    return directory.parent / f".{directory.name}.lock"


def holder_record() -> dict[str, object]:
    """Who holds the lock: written into the lock file once it is taken."""
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv)[:300],
    }


def _write_holder(fd: int) -> None:
    data = (json.dumps(holder_record()) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def describe_holder(path: Path, wait: float = 2.0) -> str:
    """The holder recorded in a lock file, in words. A holder writes its record just after it takes
    the lock, so a refused run that reads an empty or half-written record reads again for up to
    ``wait`` seconds; "another process" if it never becomes whole (a record of an older version)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            return f"pid {record['pid']} on {record['host']} since {record['since']} ({record['command']})"
        except (OSError, ValueError, KeyError, TypeError):
            if time.monotonic() >= deadline:
                return "another process"
            time.sleep(0.01)


@contextmanager
def exclusive(directory: Path, what: str = "run", instead: str = "pass name=<other name>") -> Iterator[None]:
    """Hold the lock of ``directory`` (an artifact's folder, or any file written whole) for the body; if
    another process holds it, a PipelineError that names the holder, at once (no waiting); ``instead``
    says how to write elsewhere."""
    path = lock_path(Path(directory))
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path, timeout=0, preserve_lock_file=True, on_acquired=_write_holder)
    try:
        lock.acquire()
    except Timeout:
        raise PipelineError(
            f"another {what} is writing {directory}: {describe_holder(path)}; wait for it to finish or stop "
            f"it (a killed run releases the lock by itself), or {instead}"
        ) from None
    except OSError as exc:
        if exc.errno != ENOSYS:
            fix = (
                "it is a symbolic link, and a lock file must be a plain file: remove the link"
                if path.is_symlink()
                else "make that folder writable"
            )
            raise PipelineError(
                f"cannot take the lock {path} ({exc.strerror or exc}): {fix}, or {instead}"
            ) from None
        print(
            f"warning: {path.parent} does not support file locks: {directory} is not locked", file=sys.stderr
        )
        yield
        return
    try:
        yield
    finally:
        lock.release()
