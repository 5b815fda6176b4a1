"""Where an output may go: the one check of every file or folder a command writes where its user says
(``results=``, ``out=``, ``out_dir=``, ``plot_dir=``, ``predictions_dir=``, ``output_dir=``, the API's
``results_file``, ``directory`` and ``save_path``), made before any model loads, and what a write must
still find there when it comes.

An output is the setting that names it, its path and its kind; ``check`` returns it checked, or raises
one PipelineError line that names the setting and the fix::

    checked = check(Output("out", path, page("show")))   # page: pipeline.marks
    write_bytes_atomic(checked.path, data, checked)   # pipeline.files: replaces only what was checked
    append(checked, row)                              # pipeline.results.lines: one results line

``check`` refuses (``problem``):

- a device, a FIFO, a socket, a symlink that leads nowhere or loops (the path or a folder on the way),
  a place in the kernel's own filesystems (procfs, sysfs, ...), a place this process cannot write (a
  read-only mount, a folder without write permission);
- a folder where a file is meant, a file where a folder is meant;
- a place inside an artifact's folder or a model's folder (``owner_folder``: a checkpoint, a GGUF
  conversion in the cache, a Hub snapshot), but an artifact's own folder and its pages;
- an existing file that is not this command's own output (``FileKind.mine``: its mark, or its lines; an
  empty file is anybody's), an existing folder the command may not write into (``FolderKind.mine``).

The marks that make "this command wrote it" decidable from the file itself are ``pipeline.marks``'.

A write keeps to what was checked (``unchanged``, ``confirm``, ``check_replace``): the path must still
lead where it led (a symlink swapped since is refused), the file opened without following a last
symlink must be a regular file, the one that was there (its device and inode) or, when another appeared
since, one of this kind; an atomic replace happens only over a regular file or nothing.

A new output: a kind (``page``, ``picture``, ``json_report``, ``marked_folder`` or ``folder_for`` of
``pipeline.marks``, ``pipeline.results.lines.results_lines`` for results lines, or a ``FileKind`` or
``FolderKind`` of its own), ``check`` before any model loads, then the write through
``pipeline.files.write_bytes_atomic`` with the checked output, ``pipeline.results.lines.append``, or
``make_folder`` for a folder (then its files by ``write_bytes_atomic``: only over regular files).
"""

from __future__ import annotations

import errno
import functools
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from pipeline.errors import PipelineError

# The kernel's own filesystems (type -> name): views of the system, where a file is refused, lost or
# changes a setting, whatever its mode says (root may "write" /proc/self/status).
KERNEL_FILESYSTEMS = {
    "proc": "procfs",
    "sysfs": "sysfs",
    "devtmpfs": "devtmpfs",
    "devpts": "devpts",
    "cgroup": "cgroupfs",
    "cgroup2": "cgroupfs",
    "debugfs": "debugfs",
    "tracefs": "tracefs",
    "securityfs": "securityfs",
    "pstore": "pstore",
    "bpf": "bpffs",
    "configfs": "configfs",
    "efivarfs": "efivarfs",
    "fusectl": "fusectl",
    "mqueue": "mqueue",
    "binfmt_misc": "binfmt_misc",
    "nsfs": "nsfs",
}
ARTIFACT_RECORDS = ("manifest.json", "run.json")  # beside one of ARTIFACT_TABLES: an artifact's folder
ARTIFACT_TABLES = ("documents.parquet", "spans.parquet", "parts")
ARTIFACT = "an artifact's folder (key-token tables and their manifest)"
MODEL_FILES = ("*.safetensors", "*.bin", "*.gguf", "*.pt", "*.pth", "tokenizer.json", "tokenizer.model")


@dataclass(frozen=True)
class FileKind:
    """A file a command writes: ``what`` it is (in messages), the ``command`` that writes it, an
    ``example`` file name (for a folder given instead), ``mine``: why an existing file (a binary stream
    at its start) is not this command's, None when it is; ``appended``: written in place (results
    lines), not replaced whole."""

    what: str
    command: str
    example: str
    mine: Callable[[IO[bytes]], str | None]
    appended: bool = False
    folder = False


@dataclass(frozen=True)
class FolderKind:
    """A folder a command writes into: ``what`` it is, the ``command``, ``mine``: why an existing
    folder (empty or not) is not one it may write into, None when it may; ``marker``: the file
    ``make_folder`` leaves in a folder it makes or takes (``marked_folder``); ``is_artifact``: an
    artifact's own folder (which ``make keytokens`` writes); ``in_artifact``: a folder directly in an
    artifact's (its key-token pages)."""

    what: str
    command: str
    mine: Callable[[Path], str | None]
    marker: str | None = None
    is_artifact: bool = False
    in_artifact: bool = False
    folder = True
    appended = False


Kind = FileKind | FolderKind


@dataclass(frozen=True)
class Output:
    """An output its user names: the setting that names it, where, and what it is."""

    setting: str
    path: Path
    kind: Kind


@dataclass(frozen=True)
class Checked:
    """An output as ``check`` found it: where its path led (symlinks resolved), and the (device, inode)
    of the file that was there (None: nothing, or a folder)."""

    output: Output
    real: Path
    found: tuple[int, int] | None = field(default=None)

    @property
    def path(self) -> Path:
        return self.output.path

    @property
    def kind(self) -> Kind:
        return self.output.kind


def check(output: Output) -> Checked:
    """``output`` checked (module docstring); one PipelineError line naming its setting otherwise.
    Creates nothing."""
    path = Path(output.path)
    if why := problem(path, output.kind):
        raise PipelineError(f"{output.setting}={path}{why}")
    real = Path(os.path.realpath(path))
    found = None
    if not output.kind.folder and os.path.lexists(real):
        st = os.lstat(real)
        found = (st.st_dev, st.st_ino)
    return Checked(output, real, found)


def problem(path: Path, kind: Kind) -> str | None:
    """Why ``kind`` may not be written at ``path``, as the rest of a message that names the setting and
    the path (``" is a folder: ..."``, ``": <folder> is ..."``); None when it may."""
    return place_problem(path, kind) or owner_problem(path, kind) or existing_problem(path, kind)


def place_problem(path: Path, kind: Kind) -> str | None:
    """What is wrong with the place itself: the path's kind, the folders on the way, the filesystem."""
    if path.is_dir() and not kind.folder:
        return f" is a folder: pass a file in it, e.g. {path / kind.example}"
    for parent in reversed(path.parents):
        if broken := special_file(parent):
            return f": {parent} is {broken}: pass a path in a folder that exists or can be made"
    if special := special_file(path):
        return f" is {special}: pass the path of a {'folder' if kind.folder else 'regular file'}"
    if kind.folder and path.exists() and not path.is_dir():
        return f" is a file, not a folder: pass a folder (a new one, or one {kind.command} writes into)"
    folder = nearest_existing(path if kind.folder else path.parent)
    if not folder.is_dir():
        return f": {folder} is a file, not a folder: pass a path in a folder"
    target = path if path.exists() else folder
    if kernel := kernel_filesystem(target):
        return f": {os.path.realpath(target)} is {kernel}, not a place for files: pass a path on a disk"
    return unwritable(path, folder, kind)


def unwritable(path: Path, folder: Path, kind: Kind) -> str | None:
    """Why this process cannot write there: a read-only mount (whoever asks), no write permission."""
    in_place = kind.appended and path.exists()
    target = path if in_place else folder
    if read_only_mount(target):
        return f": {os.path.realpath(target)} is on a read-only mount: pass a path on a writable disk"
    if not os.access(target, os.W_OK | (0 if in_place else os.X_OK)):
        return f": {target} is not writable here: pass a path you can write"
    return None


def read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def owner_problem(path: Path, kind: Kind) -> str | None:
    """A place in an artifact's or a model's folder (the folders on the way, symlinks resolved, and a
    folder output itself), but an artifact's own folder or its pages in it (``FolderKind``)."""
    real = Path(os.path.realpath(path))
    allowed = {real: kind.is_artifact, real.parent: kind.in_artifact} if kind.folder else {}
    for folder in [real, *real.parents] if kind.folder else real.parents:
        owner = owner_folder(folder)
        if owner and not (owner == ARTIFACT and allowed.get(folder)):
            where = "" if folder == real else f": {folder}"
            return f"{where} is {owner}, which {kind.command} never writes into: pass a path outside it"
    return None


def owner_folder(folder: Path) -> str | None:
    """What ``folder`` is when it belongs to something an output must never land in: an artifact's
    folder (its manifest or run record beside its tables or parts), a model's (a ``config.json`` beside
    weights or a tokenizer: a checkpoint, a GGUF conversion in the cache, a Hub snapshot); else None."""
    try:
        if any((folder / name).is_file() for name in ARTIFACT_RECORDS) and any(
            (folder / name).exists() for name in ARTIFACT_TABLES
        ):
            return ARTIFACT
        if (folder / "config.json").is_file() and any(
            next(folder.glob(pattern), None) for pattern in MODEL_FILES
        ):
            return "a model's folder (its config.json beside weights or a tokenizer)"
    except OSError:  # a folder that cannot be listed holds nothing this process could write over
        return None
    return None


def existing_problem(path: Path, kind: Kind) -> str | None:
    """What is already at ``path`` when the command may not write over it or into it."""
    if kind.folder:
        if not path.is_dir() or not (why := kind.mine(path)):
            return None
        return f" is {why}: {kind.command} writes only into {kind.what}; pass a new folder"
    if not os.path.lexists(path):
        return None
    try:
        with open_regular(Path(os.path.realpath(path))) as stream:
            why = None if os.fstat(stream.fileno()).st_size == 0 else kind.mine(stream)
    except OSError as exc:
        return f" cannot be read ({exc.strerror or exc}): pass another path"
    if why and kind.appended:
        return f" holds {why}: {kind.command} appends only to its own {kind.what}; pass a new path"
    if why:
        return f" holds {why}: {kind.command} writes over its own {kind.what} only; pass a new path"
    return None


def open_regular(real: Path, flags: int = os.O_RDONLY) -> IO[bytes]:
    """``real`` opened without following a last symlink and without blocking (a FIFO), as a binary
    stream; OSError when it is no regular file."""
    fd = os.open(real, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    return os.fdopen(fd, "rb")


def unchanged(checked: Checked) -> Path:
    """Where ``checked`` leads now, which must be where it led when checked: a symlink swapped since
    (to an artifact's manifest, say) is a PipelineError, and nothing is written."""
    now = Path(os.path.realpath(checked.path))
    if now != checked.real:
        raise PipelineError(
            f"{checked.output.setting}={checked.path} now leads to {now}, not to {checked.real} as when it "
            "was checked: nothing was written there; pass a path that stays put"
        )
    return now


def confirm(checked: Checked, fd: int) -> None:
    """The file open at ``fd`` (at ``checked.real``, no last symlink followed) is one the check allows:
    a regular file, the one found then, else empty or of this kind (another run's, made since)."""
    st = os.fstat(fd)
    where = f"{checked.output.setting}={checked.path}"
    if not stat.S_ISREG(st.st_mode):
        raise PipelineError(f"{where} is no longer a regular file: nothing was written")
    if checked.found == (st.st_dev, st.st_ino) or st.st_size == 0:
        return
    with os.fdopen(os.dup(fd), "rb") as stream:
        stream.seek(0)
        why = checked.kind.mine(stream)
    if why:
        raise PipelineError(f"{where} was replaced since it was checked, by {why}: nothing was written")


def check_replace(target: Path, checked: Checked | None = None) -> None:
    """An atomic replace of ``target`` may go on: nothing is there, or a regular file (never a device, a
    FIFO, a socket, a symlink or a folder), and, for a checked output, the file it found or one of its
    kind. A PipelineError otherwise."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise PipelineError(
            f"{target} is {describe(st.st_mode)}, not a regular file: it is not replaced (nothing was "
            "written); remove it or write elsewhere"
        )
    if checked is not None and checked.found != (st.st_dev, st.st_ino):
        try:
            with open_regular(target) as stream:
                confirm(checked, stream.fileno())
        except OSError as exc:
            raise PipelineError(
                f"{target} cannot be read ({exc.strerror or exc}): nothing was written"
            ) from None


def describe(mode: int) -> str:
    kinds = {
        "a symlink": stat.S_ISLNK,
        "a folder": stat.S_ISDIR,
        "a FIFO": stat.S_ISFIFO,
        "a socket": stat.S_ISSOCK,
        "a device": stat.S_ISCHR,
        "a block device": stat.S_ISBLK,
    }
    return next((kind for kind, test in kinds.items() if test(mode)), "a special file")


def special_file(path: Path) -> str | None:
    """What ``path`` is when no file could be written at it although it is no folder (a symlink that
    leads nowhere or loops, a FIFO, a socket, a device), else None (a regular file, a folder, or
    nothing)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink loop"
        return f"a symlink to {os.readlink(path)}, which does not exist" if path.is_symlink() else None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return describe(mode)


def kernel_filesystem(path: Path) -> str | None:
    """Where ``path`` (an existing file or folder) resolves into one of the kernel's own filesystems
    (``KERNEL_FILESYSTEMS``: its files are views of the system, whatever their mode says), what it
    is (``"in procfs (/proc)"``); else None."""
    real = os.path.realpath(path)
    mounted = [(point, kind) for point, kind in mounts() if within(real, point)]
    point, kind = max(mounted, key=lambda m: len(m[0]), default=("/", ""))
    if kind in KERNEL_FILESYSTEMS:
        return f"in {KERNEL_FILESYSTEMS[kind]} ({point})"
    root = next((r for r in ("/proc", "/sys") if within(real, r)), None)  # without a mount table
    return None if root is None or mounted else f"in {root}, the kernel's view of the system"


def mounts() -> list[tuple[str, str]]:
    """The mount table (mount point, filesystem type), in mount order; empty where there is none."""
    try:
        text = Path("/proc/self/mounts").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    found = [line.split() for line in text.splitlines()]
    unescape = functools.partial(re.sub, r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)))
    return [(unescape(fields[1]), fields[2]) for fields in found if len(fields) > 2]


def within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists: what decides whether ``path`` can be made there."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def make_folder(checked: Checked) -> Path:
    """The checked folder, made when new (with its kind's marker, also in an empty one it takes);
    where it leads, unchanged since the check."""
    real = unchanged(checked)
    real.mkdir(parents=True, exist_ok=True)
    marker = checked.kind.marker if checked.kind.folder else None
    if marker and not (real / marker).is_file():
        fd = os.open(real / marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        with os.fdopen(fd, "wb") as stream:
            stream.write(f"made by {checked.kind.command}: the folder it writes\n".encode())
    return real


def command_name(command: str) -> str:
    """How messages name a command: ```make show```."""
    return f"`make {command}`"


def is_empty(folder: Path) -> bool:
    return next(folder.iterdir(), None) is None
