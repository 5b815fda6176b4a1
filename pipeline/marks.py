"""The marks that make "this command wrote it" decidable from a file itself, and the kinds of output
(``pipeline.outputs``) that they tell apart: a page's ``<meta name="generator" content="longppl <command>">``
(``page``), a picture's PNG text ``Software`` = ``longppl <command>`` (``picture``), a JSON report's field
``made_by`` (``json_report``), and, for a folder whose files cannot carry a mark (a leaderboard's CSV),
a marker file ``.longppl-<command>`` in it (``marked_folder``). A folder a command only adds checked
files to is any folder (``folder_for``). Results files need no mark: their lines are their kind's
(``pipeline.results.lines.results_lines``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO

from pipeline.outputs import FileKind, FolderKind, command_name, is_empty

READ_LIMIT = 256 * 2**20  # a file read whole to find its mark (a JSON report): larger is none of ours
HEAD_BYTES = 64 * 1024  # where a page's generator mark is looked for


def made_by(command: str) -> str:
    """The mark of ``command``'s outputs (``longppl show``)."""
    return f"longppl {command}"


def page(command: str) -> FileKind:
    """An HTML page marked ``<meta name="generator" content="longppl <command>">`` (``generator_meta``)."""
    mark = generator_meta(command).encode()
    return FileKind(
        "pages", command_name(command), "page.html",
        lambda stream: None if mark in stream.read(HEAD_BYTES) else
        f"no page with the mark {mark.decode()} ({unmarked(command, 'page')})",
    )  # fmt: skip


def unmarked(command: str, what: str) -> str:
    """What to do with a file the command wrote before it marked them."""
    return f"if it is a {what} {command_name(command)} wrote before its files were marked, delete it"


def generator_meta(command: str) -> str:
    return f'<meta name="generator" content="{made_by(command)}">'


def picture(command: str) -> FileKind:
    """A PNG whose text chunk ``Software`` is ``longppl <command>`` (``reporting.common.png``)."""
    return FileKind(
        "pictures", command_name(command), "picture.png",
        lambda stream: None if png_software(stream) == made_by(command) else
        f"no PNG with the mark Software={made_by(command)} ({unmarked(command, 'picture')})",
    )  # fmt: skip


def png_software(stream: IO[bytes]) -> str | None:
    """A PNG's ``Software`` text (read before its image data); None for none, or no PNG."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(stream, formats=["PNG"]) as image:
            return image.info.get("Software")
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        return None


def json_report(command: str) -> FileKind:
    """A JSON object whose field ``made_by`` is ``longppl <command>``."""
    return FileKind(
        "JSON reports", command_name(command), "report.json",
        lambda stream: None if json_mark(stream) == made_by(command) else
        f'no JSON report with "made_by": "{made_by(command)}" ({unmarked(command, "report")})',
    )  # fmt: skip


def json_mark(stream: IO[bytes]) -> object:
    data = stream.read(READ_LIMIT + 1)
    try:
        value = json.loads(data) if len(data) <= READ_LIMIT else None
    except (ValueError, RecursionError):
        return None
    return value.get("made_by") if isinstance(value, dict) else None


def folder_for(what: str, command: str) -> FolderKind:
    """A folder the command only adds files to, each checked as it is written: any folder will do
    (but an artifact's or a model's)."""
    return FolderKind(what, command_name(command), lambda folder: None)


def marked_folder(
    command: str, marker: str | None = None, *, empty: bool = True, older: str = ""
) -> FolderKind:
    """A folder the command makes and owns whole (its files carry no mark of their own): one that holds
    ``marker`` (``.longppl-<command>``, a regular file), or, with ``empty``, an empty one (then marked);
    ``older`` says what to do with one the command made before it marked its folders."""
    marker = marker or f".longppl-{command}"

    def mine(folder: Path) -> str | None:
        if (folder / marker).is_file() and not (folder / marker).is_symlink():
            return None
        if empty and is_empty(folder):
            return None
        return f"a folder {command_name(command)} did not make (no {marker} in it{older and '; '}{older})"

    return FolderKind(f"folders it made ({marker})", command_name(command), mine, marker)
