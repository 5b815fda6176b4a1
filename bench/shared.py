"""What the benchmarks share beside the runner (``bench.runner``): the repository's root, which they
run from; the default artifact; the shipped GovReport sample's texts; paths as records hold them
(relative to the repository); names as file names; a case's command line, whose mistakes are one
``error:`` line before any work (``arguments``, and the argument types ``whole``, ``above``,
``output_file`` and ``existing``: a count of 0, an output into a missing folder, an input that is not
there)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.errors import ArgumentParser

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the embedded models and local artifacts need no network


def slug(name: str) -> str:
    """A contender's or run's name as a file name: lower case, anything but letters and digits a '-'."""
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


def relative(path: str | Path) -> str:
    """A path as a record holds it: a relative path as given (the benchmarks run from the repository
    root), an absolute one relative to the repository, or only its name when it lies outside."""
    path = Path(path)
    if not path.is_absolute():
        return str(path)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def default_artifact() -> Path:
    """The artifact `make keytokens` writes by default (``default_artifact`` in conf/common.yaml),
    relative to the repository."""
    from pipeline.files import conf_file

    return Path(conf_file("common.yaml")["default_artifact"])


def sample_texts() -> list[str]:
    """The texts of the shipped GovReport sample (data/govreport-sample.jsonl), in order."""
    path = ROOT / "data/govreport-sample.jsonl"
    return [json.loads(line)["text"] for line in path.open(encoding="utf-8")]


def sample_text(tokenizer: Any, tokens: int, doc: int | None = None) -> str:
    """Document ``doc`` of the shipped sample (None: all of them, joined by blank lines), cut before its
    ``tokens``-th token: ``tokens`` - 1 tokens, ``tokens`` with a BOS. (The official find_key_token fails
    when its last window holds a single token, iterating a 0-d tensor; a multiple of d tokens avoids it.)"""
    from pipeline.text.tokenization import encode_with_offsets

    texts = sample_texts()
    text = texts[doc] if doc is not None else "\n\n".join(texts)
    enc = encode_with_offsets(tokenizer, text)
    return text[: int(enc.offsets[tokens - 1, 0])] if len(enc.ids) >= tokens else text


def arguments(doc: str | None) -> ArgumentParser:
    """A case's command line, its module's docstring as the help (kept as written); a mistake in it is
    one ``error:`` line with exit status 2 naming the program (``pipeline.errors.ArgumentParser``)."""
    return ArgumentParser(
        prog=program(), description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def program() -> str:
    """The running program as its user starts it: ``python -m bench.<case>`` (or ``studies...``) for a
    module of the repository, else the file's name."""
    path = Path(sys.argv[0]).resolve()
    if path.suffix == ".py" and path.is_relative_to(ROOT):
        return "python -m " + ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return path.name


def whole(minimum: int = 1) -> Callable[[str], int]:
    """An argument type: a whole number of at least ``minimum`` (``--questions 0`` is refused as the
    arguments are read, not inside a case)."""

    def read(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} is no whole number of at least {minimum}")
        return value

    return read


def above(minimum: float, inclusive: bool = False) -> Callable[[str], float]:
    """An argument type: a finite number greater than ``minimum`` (seconds, gigabytes), or equal to it
    where ``inclusive`` (a budget of 0 s: nothing more is run)."""
    words = "of at least" if inclusive else "above"

    def read(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not (value >= minimum if inclusive else value > minimum) or value == float("inf"):
            raise argparse.ArgumentTypeError(f"{text!r} is no finite number {words} {minimum:g}")
        return value

    return read


def output_file(text: str) -> Path:
    """An argument type: a file the command writes (``--json``, ``--out``), checked as the arguments are
    read, before any work: its folder exists and it is no folder itself."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: name a file in it")
    if not path.absolute().parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: its folder {path.absolute().parent} does not exist")
    return path


def existing(text: str) -> Path:
    """An argument type: a file or folder the command reads, which must be there."""
    if not Path(text).exists():
        raise argparse.ArgumentTypeError(f"{text!r} does not exist")
    return Path(text)


def key_jaccard(base: Any, other: Any) -> float | None:
    """The Jaccard index of two stage-1 artifacts' key tokens (document, token index) over the documents
    ``other`` scored; None where neither has one."""
    docs = set(other.tokens.column("doc_id").to_pylist())

    def keys(artifact: Any) -> set:
        table = artifact.tokens.select(["doc_id", "token_index", "is_key"]).to_pylist()
        return {(r["doc_id"], r["token_index"]) for r in table if r["is_key"] and r["doc_id"] in docs}

    a, b = keys(base), keys(other)
    return len(a & b) / len(a | b) if a | b else None
