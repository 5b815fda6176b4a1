"""`make publish`'s last line: where the artifact went on the Hub, or the folder a dry run wrote."""

from __future__ import annotations

from typing import Any


def summary(published: Any) -> str:
    """The line for a ``pipeline.sharing.hub_dataset.Published``."""
    if published.url:
        return f"uploaded: {published.url}"
    return f"dry run: the folder that would be uploaded to {published.repo} is {published.folder}"
