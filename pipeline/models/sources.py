"""What identifies a loaded model, so that two runs of different models are never recorded as one: the
weights' hashes (a local folder), the GGUF file's hash (an embedded or GGUF model), the Hub commit
actually loaded (a Hub model), the tokenizer files' hashes (a local folder or a Hub snapshot), and for a
model in memory a hash of its parameters and of its tokenizer.

``ModelSource`` is the record (results lines and manifests carry ``to_dict()``); ``hub_commit`` reads
which commit a Hub id resolves to without ``config._commit_hash`` (which transformers 5 no longer sets):
the Hub's answer online, else the snapshot folder the local Hub cache resolves it to.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from pipeline.provenance import file_sha256, json_sha256

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
# The files a tokenizer is read from (fast, SentencePiece, BPE and WordPiece vocabularies, special tokens).
TOKENIZER_FILE = re.compile(
    r"^(tokenizer.*|vocab.*|merges.*|special_tokens_map\.json|added_tokens\.json|.*\.model|.*\.tiktoken|spiece.*)$"
)


@dataclass
class ModelSource:
    """Where a model came from, precisely enough to reproduce a number computed with it."""

    spec: str
    kind: str  # "embedded" | "gguf" | "local" | "hub" | "memory"
    path: str
    revision: str | None = None  # a Hub model: the commit loaded
    file_sha256: str | None = None
    weights_sha256: dict[str, str] = field(default_factory=dict)
    attn_implementation: str | None = None  # changes numbers at the level of float rounding
    # The tokenizer's files (a local folder, a Hub snapshot) or, in memory, its serialised form; None
    # where another hash covers it (a GGUF file holds its tokenizer) and left out of the record then.
    tokenizer_sha256: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        if record["tokenizer_sha256"] is None:
            del record["tokenizer_sha256"]
        return record


def tokenizer_sha256(directory: Path) -> dict[str, str]:
    """The sha256 of each tokenizer file in a model folder (``TOKENIZER_FILE``), by name."""
    return {
        p.name: file_sha256(p)
        for p in sorted(directory.iterdir())
        if p.is_file() and TOKENIZER_FILE.match(p.name) and p.suffix not in WEIGHT_SUFFIXES
    }


def parameters_sha256(model: Any) -> str:
    """A hash of a model in memory: every tensor of its state dict (name, dtype, shape, bytes)."""
    digest = hashlib.sha256(b"longppl-parameters-1")
    for name, tensor in sorted(model.state_dict().items()):
        flat = tensor.detach().reshape(-1).contiguous().cpu()
        digest.update(f"\0{name}\0{flat.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(flat.view(dtype=torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return digest.hexdigest()


def tokenizer_digest(tokenizer: Any) -> str:
    """A hash of a tokenizer in memory: its fast tokenizer's full serialisation (vocabulary, merges,
    normaliser, added tokens), else its vocabulary, and its special token ids."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    body = backend.to_str() if backend is not None else sorted(tokenizer.get_vocab().items())
    specials = {k: getattr(tokenizer, k, None) for k in ("bos_token_id", "eos_token_id", "unk_token_id")}
    return json_sha256({"class": type(tokenizer).__name__, "tokenizer": body, "special": specials})


def identify_in_memory(source: ModelSource, model: Any, tokenizer: Any) -> None:
    """Fill in the hashes of a model in memory (its parameters and tokenizer), once: seconds for a
    model of a few GB, so only when a result is recorded."""
    if source.kind == "memory" and not source.weights_sha256:
        source.weights_sha256 = {"parameters": parameters_sha256(model)}
        source.tokenizer_sha256 = {"tokenizer": tokenizer_digest(tokenizer)}


def cached_snapshot(repo_id: str, revision: str | None) -> Path | None:
    """The folder of ``repo_id`` at ``revision`` in the local Hub cache (its ``config.json``'s), or None."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    return Path(found).parent if isinstance(found, str) else None
