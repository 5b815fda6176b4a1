"""Where the shipped configs and data are (``CONF_DIR``, ``DATA_DIR``; ``locate_input`` for a relative
path a config names), atomic file writes (a file appears complete or not at all, even when a run is
killed mid-write; only over a regular file or nothing, and, for an output its user named, where
``pipeline.outputs`` checked it; ``write_json_new``: only where no file is), paths as records keep them
(``recorded_path``), and the configuration
directory's files read as plain data (``conf_file``: no Hydra outside the commands)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from pipeline.errors import PipelineError
from pipeline.outputs import Checked, check_replace, unchanged
from pipeline.outputs import nearest_existing as nearest_existing  # where a file or folder could be made

PACKAGE_DIR = Path(__file__).resolve().parent
# The folder that holds the shipped conf/ and data/: an installed wheel carries them inside the package
# (pipeline/conf, pipeline/data: the package-dir mapping of pyproject.toml); a checkout, editable
# install included, has them beside pipeline/.
RESOURCE_ROOT = PACKAGE_DIR if (PACKAGE_DIR / "conf").is_dir() else PACKAGE_DIR.parent
CONF_DIR = RESOURCE_ROOT / "conf"
DATA_DIR = RESOURCE_ROOT / "data"


def locate_input(path: str | Path) -> Path:
    """A file or folder a config names (``data/govreport-sample.jsonl``, ``conf/refresh/recorded.jsonl``):
    as given when it exists there (absolute, or relative to the working directory, which wins), else a
    relative path under ``RESOURCE_ROOT`` when it exists there (the shipped one, from any working
    directory), else as given (so that an error names it as written)."""
    given = Path(path)
    if given.is_absolute() or given.exists():
        return given
    shipped = RESOURCE_ROOT / given
    return shipped if shipped.exists() else given


def conf_file(name: str) -> dict[str, Any]:
    """A file of ``conf/`` (``model/local.yaml``) as plain data, read safely (no interpolation)."""
    return yaml.safe_load((CONF_DIR / name).read_text(encoding="utf-8")) or {}


def write_bytes_atomic(path: Path, data: bytes, checked: Checked | None = None) -> None:
    """Write to a temporary file beside ``path``, flush it to disk, then rename it into place, only over
    a regular file or nothing (``pipeline.outputs.check_replace``: never over a device, a FIFO, a symlink
    or a folder). An output its user named is written where its check found it (``checked``: the
    path ``path`` led to then, refused when a symlink on the way was swapped since, and over the file
    found then or one of its kind). The file gets the mode of any new file (0666 less the umask:
    readable by others on a shared filesystem), not the temporary file's private 0600."""
    path = Path(path) if checked is None else unchanged(checked)
    with staged(path, data) as tmp:
        check_replace(path, checked)
        os.replace(tmp, path)


def write_json_new(path: Path, value: Any) -> bool:
    """``value`` written whole at ``path`` only if no file is there, atomically (a hard link of a staged
    file: of several processes, one wins); False when a file was already there."""
    data = strict_json(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    with staged(path, data.encode()) as tmp:
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    return True


@contextlib.contextmanager
def staged(path: Path, data: bytes) -> Iterator[str]:
    """A temporary file beside ``path`` holding ``data``, flushed to disk, with the mode of any new file
    (0666 less the umask), for the block to put in place; removed after, if it is still there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        yield tmp
    finally:
        Path(tmp).unlink(missing_ok=True)


def umask() -> int:
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json_atomic(path: Path, value: Any, checked: Checked | None = None) -> None:
    """Indented strict JSON with sorted keys (stable bytes for the same value)."""
    write_bytes_atomic(
        path, (strict_json(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode(), checked
    )


def strict_json(value: Any, **options: Any) -> str:
    """``json.dumps`` without NaN or infinity, which JSON does not have (strict readers reject them):
    a PipelineError names the first such value instead."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:
        where = non_finite_path(value) or "a value"
        raise PipelineError(
            f"{where} is not a finite number, which JSON cannot hold: nothing was written"
        ) from None


def non_finite_path(value: Any, path: str = "") -> str | None:
    """The dotted path of the first NaN or infinite float in nested dicts and lists, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{path or 'the value'} ({value})"
    children = (
        value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    )
    for key, child in children:
        found = non_finite_path(child, f"{path}.{key}" if path else str(key))
        if found:
            return found
    return None


def write_table_atomic(path: Path, table: pa.Table, checked: Checked | None = None) -> None:
    """A Parquet file (zstd), written whole (where ``checked`` found it, when given)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    write_bytes_atomic(path, sink.getvalue().to_pybytes(), checked)


def recorded_path(path: str | Path) -> str:
    """A path as a record (a results line, a manifest, a report) keeps it, the same on every checkout
    and machine: relative to the working directory when under it (make runs in the repository's root,
    so repository-relative), ``~/...`` under the home folder (the caches), else as given (a place the
    user chose outside both, which only that machine has)."""
    absolute = Path(path).expanduser().absolute()
    for base, prefix in ((Path.cwd(), ""), (Path.home(), "~/")):
        try:
            return prefix + absolute.relative_to(base.absolute()).as_posix()
        except ValueError:
            continue
    return str(path)
