"""Where the importer's inputs come from, pinned: a Hub dataset or tokenizer resolved to its commit,
or a local copy identified by its path and a hash of its files. The loading itself is done by the
project's usual code (``pipeline.text.corpus`` for the texts, ``transformers`` for tokenizers), at the
resolved commit."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError
from pipeline.files import recorded_path
from pipeline.provenance import tree_sha256


@dataclass(frozen=True)
class Pinned:
    """One input: what to load (a local path, or a Hub id at ``revision``) and its provenance."""

    location: str
    revision: str | None
    record: dict[str, Any]


def pin(spec: str, revision: str | None, repo_type: str, fallback: str) -> Pinned:
    """A local path (hashed) or a Hub repository resolved to a commit. ``fallback`` names the
    setting that takes a local copy instead, for the error when the Hub cannot be reached."""
    path = Path(spec).expanduser()
    if path.exists():
        return Pinned(str(path), None, {"path": recorded_path(path.resolve()), "sha256": tree_sha256(path)})
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        info = (
            api.dataset_info(spec, revision=revision)
            if repo_type == "dataset"
            else api.model_info(spec, revision=revision)
        )
    except Exception as exc:  # offline, unknown, gated, network: one answer for the user
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0].split(". ")[0][:160]
        flag = " --repo-type dataset" if repo_type == "dataset" else ""
        saved = " (or a copy saved with datasets' save_to_disk)" if repo_type == "dataset" else ""
        raise PipelineError(
            f"could not reach '{spec}' on the Hugging Face Hub ({detail}); use a local copy: `hf download "
            f"{spec}{flag} --local-dir DIR` on a connected machine{saved}, then pass {fallback}=DIR"
        ) from exc
    return Pinned(spec, info.sha, {"hub": spec, "requested_revision": revision, "revision": info.sha})


def load_tokenizer(pinned: Pinned, what: str, fallback: str) -> Any:
    """A fast tokenizer (character offsets are needed) from a pinned source."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(pinned.location, revision=pinned.revision)
    except (OSError, ValueError) as exc:
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        raise PipelineError(
            f"could not load {what} '{pinned.location}' ({detail}): for a gated model log in with "
            f"`hf auth login`, or download it and pass {fallback}=DIR"
        ) from exc
    if not getattr(tokenizer, "is_fast", False):
        raise PipelineError(
            f"{what} '{pinned.location}' has no fast tokenizer: its character offsets are needed"
        )
    return tokenizer
