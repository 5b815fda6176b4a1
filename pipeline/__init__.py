"""LongPPL: perplexity on the tokens that need long context (Fang et al., ICLR 2025).

The Python API (``pipeline.api``, ``pipeline.api.dropin``, ``pipeline.api.callback``) is also reachable from
here, imported on first use: ``find_key_tokens``, ``save_key_tokens``, ``compute_longppl``,
``LongPPLCallback`` and ``score_model`` (``pipeline.api.score``: ``pipeline.score`` is the score stage).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

API = {
    "score_model": ("pipeline.api", "score"),
    "find_key_tokens": ("pipeline.api", "find_key_tokens"),
    "save_key_tokens": ("pipeline.api", "save_key_tokens"),
    "compute_longppl": ("pipeline.api.dropin", "compute_longppl"),
    "LongPPLCallback": ("pipeline.api.callback", "LongPPLCallback"),
}


def __getattr__(name: str) -> Any:
    if name not in API:
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
    module, attribute = API[name]
    return getattr(importlib.import_module(module), attribute)
