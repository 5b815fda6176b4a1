"""The Hugging Face Hub as a source of inputs: which locations need it, whether it is off limits, and
whether a Hub model can be loaded (staying offline when no input needs it: ``pipeline.jobs.recipe``)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

HUB_DATASET_PREFIX = (
    "hf://datasets/"  # hf://datasets/<org>/<name>[@<revision>]: a key-token artifact on the Hub
)


COMMIT = re.compile(r"^[0-9a-f]{40}$")


URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")  # scheme://...: a location, not a local path
HUB_MODEL_URL = re.compile(r"^hf://(?:models/)?([^/@]+/[^/@]+)/?(?:@(.+))?$", re.IGNORECASE)


def is_hub_dataset(location: object) -> bool:
    """Whether a location is ``hf://datasets/...`` (the scheme and ``datasets`` in any case)."""
    return str(location)[: len(HUB_DATASET_PREFIX)].lower() == HUB_DATASET_PREFIX


def is_url(text: object) -> bool:
    """Whether ``text`` is a ``scheme://`` location rather than a path (no such path exists here)."""
    return bool(URL.match(str(text))) and not Path(str(text)).exists()


def hub_model_hint(spec: str) -> str:
    """What to pass instead of a model given as a URL: its Hub id (and revision) for ``hf://...``."""
    found = HUB_MODEL_URL.match(spec)
    if found is None:
        return "pass a checkpoint directory, a .gguf file or a Hub model id (org/name)"
    revision = f" with revision={found[2]}" if found[2] else ""
    return f"a Hub model is given by its id: model.spec={found[1]}{revision}"


def hub_offline() -> bool:
    """Whether the Hub is off limits: ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set."""
    from huggingface_hub import constants

    flags = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
    return constants.is_offline_mode() or any(f and f.upper() in ("1", "ON", "YES", "TRUE") for f in flags)


@dataclass(frozen=True)
class HubModel:
    """Whether a model on the Hub can be loaded: ``problem`` says why not (None: it can);
    ``cache_only``: load from the local cache only (offline, or the Hub unreachable and the model
    cached); ``unreached``: the problem is reaching the Hub, so a download elsewhere would do."""

    problem: str | None = None
    cache_only: bool = False
    unreached: bool = False
    commit: str | None = None  # the commit the revision resolves to (the Hub's answer, else the cache's)


def snapshot_commit(path: object) -> str | None:
    """The commit of a file in the local Hub cache (``.../snapshots/<commit>/<file>``), or None."""
    if not isinstance(path, str):
        return None
    parts = Path(path).parts
    if "snapshots" in parts[:-1]:
        candidate = parts[parts.index("snapshots") + 1]
        return candidate if COMMIT.match(candidate) else None
    return None


def hub_model(repo_id: str, revision: str | None) -> HubModel:
    """Whether ``repo_id`` can be loaded from the Hub, decided at once: one metadata request (no
    retries, the Hub's own metadata timeout), none offline."""
    from huggingface_hub import HfApi, constants, try_to_load_from_cache
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        return HubModel(f"not a Hub id: {exc}")
    in_cache = snapshot_commit(try_to_load_from_cache(repo_id, "config.json", revision=revision))
    cached = in_cache is not None
    if hub_offline():
        missing = "HF_HUB_OFFLINE=1 is set and it is not in the local Hub cache"
        return HubModel(cache_only=True, commit=in_cache) if cached else HubModel(missing, True, True)
    try:
        info = HfApi().model_info(repo_id, revision=revision, timeout=constants.HF_HUB_ETAG_TIMEOUT)
    except GatedRepoError:
        return HubModel("it is gated: accept its terms on its Hub page, then run `hf auth login`")
    except RepositoryNotFoundError:
        return HubModel("no such model on the Hub; a private one needs `hf auth login`")
    except RevisionNotFoundError:
        return HubModel(f"the Hub has no revision {revision!r} of it")
    except Exception as exc:  # no answer: DNS, connection, timeout, a server error
        if cached:
            return HubModel(cache_only=True, commit=in_cache)
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        return HubModel(
            f"the Hub could not be reached ({detail}) and it is not in the local Hub cache", unreached=True
        )
    return HubModel(commit=info.sha)
