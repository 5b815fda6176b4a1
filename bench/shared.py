"""What the benchmarks share beside the runner (``bench.runner``): the repository's root, which they
run from; the default artifact; the shipped GovReport sample's texts; paths as records hold them
(relative to the repository); names as file names; a case's command line."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

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


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """A case's command line, its module's docstring as the help (kept as written)."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def key_jaccard(base: Any, other: Any) -> float | None:
    """The Jaccard index of two stage-1 artifacts' key tokens (document, token index) over the documents
    ``other`` scored; None where neither has one."""
    docs = set(other.tokens.column("doc_id").to_pylist())

    def keys(artifact: Any) -> set:
        table = artifact.tokens.select(["doc_id", "token_index", "is_key"]).to_pylist()
        return {(r["doc_id"], r["token_index"]) for r in table if r["is_key"] and r["doc_id"] in docs}

    a, b = keys(base), keys(other)
    return len(a & b) / len(a | b) if a | b else None
