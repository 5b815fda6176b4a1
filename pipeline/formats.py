"""How numbers and names are written, for every layer that prints or names a file: a number in a
fixed format (``fmt``; outputs are byte-identical for the same inputs) and a file-name-safe form of a
name (``file_slug``). Foundation: imports nothing of the pipeline."""

from __future__ import annotations

import math
import re


def fmt(value: float | None, spec: str = ".4f", missing: str = "n/a") -> str:
    """A number in a fixed format; ``missing`` for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    return format(value, spec)


def file_slug(name: str, fallback: str) -> str:
    """A file-name-safe form of a name (letters, digits, ``.``, ``_``, ``-``); ``fallback`` if none."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_.") or fallback
