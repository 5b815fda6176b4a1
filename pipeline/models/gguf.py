"""GGUF model files: their header checked, then dequantised once into a cached safetensors checkpoint
keyed by the file's sha256, so later loads take seconds instead of a minute."""

from __future__ import annotations

import json
import os
import struct
import tempfile
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pipeline.errors import PipelineError
from pipeline.provenance import file_sha256

MAGIC = b"GGUF"
HEADER = struct.Struct("<4sIQQ")  # magic, version, tensor count, metadata count (little-endian)
VERSIONS = (2, 3)  # what the gguf reader transformers uses reads
# What reading a damaged or foreign file raises inside transformers' GGUF reader.
READ_ERRORS = (OSError, ValueError, KeyError, IndexError, EOFError, struct.error, NotImplementedError)


def default_cache_dir() -> Path:
    """Where converted GGUF checkpoints live; ``LONGPPL_CACHE`` overrides it."""
    return Path(os.environ.get("LONGPPL_CACHE", Path.home() / ".cache" / "longppl"))


def gguf_cache_path(gguf: Path, sha: str, cache_dir: Path) -> Path:
    """Where a GGUF file's converted checkpoint is cached (keyed by the file's sha256)."""
    return cache_dir / "gguf" / f"{gguf.stem}-{sha[:16]}"


def check_header(path: Path) -> None:
    """The fixed header of a GGUF file (magic bytes, version, counts that fit the file), read before
    anything else reads the file; a PipelineError says what is wrong with it."""
    with open(path, "rb") as handle:
        head = handle.read(HEADER.size)
    if head[:4] != MAGIC:
        raise PipelineError(
            f"{path} is not a GGUF file (it does not start with the bytes 'GGUF'): pass a .gguf model "
            "file, a checkpoint directory or a Hub id"
        )
    if len(head) < HEADER.size:
        raise PipelineError(
            f"{path}: its GGUF header is cut short ({len(head)} bytes): download the file again"
        )
    _, version, n_tensors, n_values = HEADER.unpack(head)
    if version not in VERSIONS:
        raise PipelineError(
            f"{path}: GGUF version {version}, not one this pipeline reads ({', '.join(map(str, VERSIONS))}): "
            "convert the model with a current llama.cpp, or pass a checkpoint directory"
        )
    size = path.stat().st_size
    if n_tensors > size or n_values > size:
        raise PipelineError(
            f"{path}: its GGUF header claims {n_tensors} tensors and {n_values} metadata entries, more than "
            f"a file of {size} bytes can hold: the file is damaged; download it again"
        )


def convert_gguf(gguf: Path, cache_dir: Path | None = None) -> tuple[Path, str]:
    """Dequantise a GGUF file once into a safetensors checkpoint; returns (directory, file sha256).

    transformers refuses ``save_pretrained`` on a GGUF-loaded model, so a fresh model is built from
    the config and given the dequantised state dict. The directory appears atomically.
    """
    check_header(gguf)
    sha = file_sha256(gguf)
    target = gguf_cache_path(gguf, sha, cache_dir or default_cache_dir())
    if (target / "longppl-source.json").is_file():
        return target, sha
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"converting {gguf.name} to a cached checkpoint in {target} (once; about a minute)", flush=True)
    tokenizer, loaded = read_gguf(gguf)
    settings = loaded.config.to_dict()
    settings.pop("quantization_config", None)  # the weights we save are dequantised
    fresh = AutoModelForCausalLM.from_config(type(loaded.config).from_dict(settings), dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict(), strict=True)
    fresh.eval()
    _check_same_outputs(loaded, fresh, gguf.name)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".tmp-") as tmp:
        staging = Path(tmp) / "ckpt"
        fresh.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "longppl-source.json").write_text(
            json.dumps({"gguf_file": gguf.name, "gguf_sha256": sha}, indent=2)
        )
        try:
            os.replace(staging, target)
        except OSError:  # another process finished first: keep theirs
            if not (target / "longppl-source.json").is_file():
                raise
    return target, sha


def read_gguf(gguf: Path) -> tuple[Any, Any]:
    """The tokenizer and the (dequantised, float32) model of a GGUF file, through transformers."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
    except READ_ERRORS as exc:
        detail = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise PipelineError(f"could not read the GGUF file {gguf}: {detail}") from None
    return tokenizer, model


def _check_same_outputs(reference: Any, candidate: Any, name: str) -> None:
    probe = (torch.arange(16) * 7919 % reference.config.vocab_size)[None]
    with torch.inference_mode():
        diff = (reference(input_ids=probe).logits - candidate(input_ids=probe).logits).abs().max().item()
    if diff > 1e-4:
        raise PipelineError(
            f"converting {name} changed the model's outputs (max logit difference {diff:.2e})"
        )
