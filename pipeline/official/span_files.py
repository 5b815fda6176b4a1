"""The official LongPPL repository's key-span files, read and written as numbers (never evaluated).

A span file holds the merged key-token character intervals of one document on one line:
``[start, end];[start, end];...`` (``[40349, 40350];[40351, 40358]``); an empty file has no span.
A folder holds ``slice_<i>.txt`` for documents i = 0 .. n-1, in corpus order. The official loader
calls ``eval`` on each piece; this parser accepts exactly two non-negative integers per piece and
rejects anything else, naming the file and the piece. As an output (the drop-in's ``save_path``), a
file may be written over only when it is a span file (``KIND``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import IO

import numpy as np

from pipeline.definition import merge_spans
from pipeline.errors import PipelineError
from pipeline.outputs import FileKind

PIECE = re.compile(r"\[\s*(-?\d+)\s*,\s*(-?\d+)\s*\]")
SLICE = re.compile(r"slice_(\d+)\.txt")
MAX_OFFSET = 2**31 - 1  # offsets are int32 in the artifact's tables
MAX_FILE_BYTES = 64 * 2**20  # a span file of more is none this writes (a long document's spans: kilobytes)


def parse_spans(text: str, where: str = "span file") -> np.ndarray:
    """Spans of one file's text as int64 (n, 2), checked: integers, 0 <= start <= end, sorted by start.
    They may overlap: the official code merges only intervals that touch, so two key tokens sharing a
    character (a multi-byte character split into byte tokens) give two overlapping intervals."""
    body = text.removesuffix("\n")
    if "\n" in body:
        raise PipelineError(f"{where}: expected one line of spans, found {body.count(chr(10)) + 1} lines")
    if not body.strip():
        return np.zeros((0, 2), dtype=np.int64)
    spans = []
    for number, piece in enumerate(body.split(";"), start=1):
        match = PIECE.fullmatch(piece.strip())
        if match is None:
            raise PipelineError(
                f"{where}: span {number} is {piece[:40]!r}, not '[start, end]' with two integers"
            )
        if any(len(match[k].lstrip("-").lstrip("0")) > 10 for k in (1, 2)):
            raise PipelineError(
                f"{where}: span {number} is {piece.strip()[:40]!r}: a number past {MAX_OFFSET}, "
                "the largest character offset an artifact holds"
            )
        start, end = int(match[1]), int(match[2])
        if start < 0 or end < 0:
            raise PipelineError(f"{where}: span {number} [{start}, {end}] is negative")
        if end > MAX_OFFSET:
            raise PipelineError(
                f"{where}: span {number} [{start}, {end}] ends past {MAX_OFFSET}, the largest character "
                "offset an artifact holds"
            )
        if end < start:
            raise PipelineError(f"{where}: span {number} [{start}, {end}] is reversed (end < start)")
        if spans and start < spans[-1][0]:
            raise PipelineError(
                f"{where}: span {number} [{start}, {end}] starts before the previous one "
                f"({spans[-1][0]}): spans must be sorted"
            )
        spans.append((start, end))
    return np.asarray(spans, dtype=np.int64).reshape(-1, 2)


def foreign_file(stream: IO[bytes]) -> str | None:
    """Why the file in ``stream`` is no span file; None when it is one."""
    data = stream.read(MAX_FILE_BYTES + 1)
    try:
        parse_spans(data.decode("utf-8") if len(data) <= MAX_FILE_BYTES else "\n\n")
    except (UnicodeDecodeError, PipelineError):
        return "no key-span file ('[start, end];...' on one line)"
    return None


KIND = FileKind("key-span files", "the drop-in compute_longppl", "spans.txt", foreign_file)


def read_span_file(path: str | Path) -> np.ndarray:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PipelineError(f"{path}: not UTF-8 text (byte {exc.start})") from exc
    return parse_spans(text, str(path))


def read_span_folder(folder: str | Path) -> list[np.ndarray]:
    """The spans of every document of a folder (``slice_0.txt`` .. ``slice_<n-1>.txt``), in order."""
    folder = Path(folder)
    if not folder.is_dir():
        raise PipelineError(f"no span folder at {folder}")
    indices = {}
    for path in folder.iterdir():
        if match := SLICE.fullmatch(path.name):
            indices[int(match[1])] = path
    if not indices:
        raise PipelineError(f"{folder} holds no span file (slice_<i>.txt)")
    missing = sorted(set(range(max(indices) + 1)) - set(indices))
    if missing:
        raise PipelineError(
            f"{folder}: span files of documents {missing[:5]} are missing (slice_0.txt .. "
            f"slice_{max(indices)}.txt must all be there)"
        )
    return [read_span_file(indices[i]) for i in range(len(indices))]


def merge_overlaps(spans: np.ndarray) -> tuple[np.ndarray, int]:
    """Overlapping (or touching) spans merged into one, as an artifact stores them (its spans are
    disjoint), and how many spans went away. Which tokens are key does not change, save for a token
    that straddles two overlapping spans without lying inside either (key once they are merged)."""
    starts, ends, _ = merge_spans(spans[:, 0], spans[:, 1])
    return np.stack([starts, ends], axis=1).reshape(-1, 2), len(spans) - len(starts)


def format_spans(starts: np.ndarray, ends: np.ndarray) -> str:
    """Spans in the official file format (what its ``find_key_token`` writes to ``save_path``)."""
    return ";".join(f"[{int(a)}, {int(b)}]" for a, b in zip(starts, ends, strict=True))
