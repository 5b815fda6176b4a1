"""The Hugging Face Hub as a source of inputs: which locations need it, and staying offline when none does."""

from __future__ import annotations

import os

HUB_DATASET_PREFIX = (
    "hf://datasets/"  # hf://datasets/<org>/<name>[@<revision>]: a key-token artifact on the Hub
)


def is_hub_dataset(location: object) -> bool:
    return str(location).startswith(HUB_DATASET_PREFIX)


def offline_unless(*remote: bool) -> None:
    """When no input needs the Hub (every ``remote`` is False), set ``HF_HUB_OFFLINE=1``: a missing
    file then fails at once instead of waiting on download retries. An explicit setting is kept."""
    if not any(remote):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
