"""What identifies a loaded model, so that two runs of different models are never recorded as one: the
weights' hashes (a local folder), the GGUF file's hash (an embedded or GGUF model), the Hub commit
actually loaded (a Hub model), the tokenizer files' hashes (a local folder or a Hub snapshot), the
config files' hashes (a local folder: ``config.json``, ``generation_config.json``) and with
``trust_remote_code`` its code's (``config_sha256``), and for a model in memory a hash of its
parameters, its config and its tokenizer.

``ModelSource`` is the record (results lines and manifests carry ``to_dict()``); ``hub_commit`` reads
which commit a Hub id resolves to without ``config._commit_hash`` (which transformers 5 no longer sets):
the Hub's answer online, else the snapshot folder the local Hub cache resolves it to.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from pipeline.files import recorded_path
from pipeline.provenance import file_sha256, json_sha256

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
CONFIG_FILES = ("config.json", "generation_config.json")  # beside the weights and tokenizer
# The kinds whose ``path`` is a file or folder of this machine (recorded as ``recorded_path`` gives it).
LOCATED = ("embedded", "gguf", "local")
DYNAMIC_MODULES = "transformers_modules"  # where transformers puts a model's own code (trust_remote_code)
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
    # What else changes its numbers (a local folder's config files, remote code; a model in memory: its
    # config); None where another hash covers it (a Hub commit, a GGUF file), left out of the record then.
    config_sha256: dict[str, str] | None = None
    # A local folder's weights while they are hashed beside the run (``weight_hashes.WeightHashing``):
    # ``to_dict`` waits for them, checked, before the record says anything.
    pending: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The record, with every hash it names computed (the weights' waited for, ``settle``)."""
        self.settle()
        return self._record()

    def settle(self) -> None:
        """The weights' hashes, once computed and checked (``WeightHashing.confirmed``)."""
        if self.pending is not None:
            self.weights_sha256 = self.pending.confirmed()
            self.pending = None

    def provisional(self, recorded: dict[str, str] | None = None, where: str = "") -> dict[str, Any]:
        """The record now, without waiting for the weights' hashes: a file not hashed yet is named by
        the hash ``recorded`` (an earlier run's, at ``where``) gives it, checked when it settles, or by
        its version (``WeightHashing.provisional``)."""
        if self.pending is None:
            return self._record()
        return {**self._record(), "weights_sha256": self.pending.provisional(recorded, where)}

    def _record(self) -> dict[str, Any]:
        record = asdict(replace(self, pending=None))
        del record["pending"]
        if self.kind in LOCATED:
            record["path"] = recorded_path(self.path)
        for optional in ("tokenizer_sha256", "config_sha256"):
            if record[optional] is None:
                del record[optional]
        return record


def tokenizer_sha256(directory: Path) -> dict[str, str]:
    """The sha256 of each tokenizer file in a model folder (``TOKENIZER_FILE``), by name."""
    return {
        p.name: file_sha256(p)
        for p in sorted(directory.iterdir())
        if p.is_file() and TOKENIZER_FILE.match(p.name) and p.suffix not in WEIGHT_SUFFIXES
    }


def config_sha256(directory: Path, remote_code: bool) -> dict[str, str]:
    """The sha256 of a model folder's config files (``CONFIG_FILES``: ``rope_theta`` alone changes every
    number) and, when its own code runs (``remote_code``: ``trust_remote_code``), of its ``.py`` files."""
    files = [directory / name for name in CONFIG_FILES if (directory / name).is_file()]
    files += sorted(directory.glob("*.py")) if remote_code else []
    return {p.name: file_sha256(p) for p in files}


def remote_code_sha256(*objects: Any) -> dict[str, str]:
    """The sha256 of the code files that define ``objects``' classes where that code came with a model
    (transformers' dynamic modules: ``trust_remote_code``), by their path under the modules' folder."""
    found = {}
    for obj in objects:
        module = sys.modules.get(type(obj).__module__)
        source = getattr(module, "__file__", None)
        if source is None or DYNAMIC_MODULES not in Path(source).parts:
            continue
        folder = Path(source).parent
        root = Path(*Path(source).parts[: Path(source).parts.index(DYNAMIC_MODULES) + 1])
        found.update({str(p.relative_to(root)): file_sha256(p) for p in sorted(folder.glob("*.py"))})
    return dict(sorted(found.items()))


def identify_config_and_code(source: ModelSource, model: Any, tokenizer: Any, remote_code: bool) -> None:
    """Record what else changes a loaded model's numbers (``config_sha256``): a local folder's config
    files (and code), or for a Hub model the code that came from outside its commit's record."""
    if source.kind == "local":
        source.config_sha256 = config_sha256(Path(source.path), remote_code)
    elif source.kind == "hub" and remote_code:
        source.config_sha256 = remote_code_sha256(model, model.config, tokenizer) or None


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


def config_digest(model: Any) -> str:
    """A hash of a model in memory's config, every value (``rope_theta`` alone changes every number)
    but where it was read from and the transformers version."""
    config = getattr(model, "config", None)
    values = json.loads(config.to_json_string(use_diff=False)) if hasattr(config, "to_json_string") else None
    if isinstance(values, dict):
        values = {k: v for k, v in values.items() if not k.startswith("_") and k != "transformers_version"}
    return json_sha256({"config": values})


def identify_in_memory(source: ModelSource, model: Any, tokenizer: Any) -> None:
    """Fill in the hashes of a model in memory (its parameters and tokenizer), once: seconds for a
    model of a few GB, so only when a result is recorded."""
    if source.kind == "memory" and not source.weights_sha256:
        source.weights_sha256 = {"parameters": parameters_sha256(model)}
        source.tokenizer_sha256 = {"tokenizer": tokenizer_digest(tokenizer)}
        source.config_sha256 = {"config": config_digest(model)}


def cached_snapshot(repo_id: str, revision: str | None) -> Path | None:
    """The folder of ``repo_id`` at ``revision`` in the local Hub cache (its ``config.json``'s), or None."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    return Path(found).parent if isinstance(found, str) else None
