"""What tells two results apart: the model (its identity, not its name), the settings and the documents
scored, so that two runs that differ in any of them are never shown, compared or matched as one.

- ``model_identity``: what identifies a model in a results line's ``model`` record (``ModelSource``):
  its kind, the GGUF file's hash, the weights', tokenizer files' and config files' (and remote code's)
  hashes, the Hub commit, the attention implementation; not where it was read from (a path), nor its name.
- ``partial``: whether a line scored fewer documents than its artifact holds (``settings.documents``
  names the ids scored; a line of schema 4 without it is judged by its per-document values against
  the artifact's identity). Partial results are never leaderboard entries.
- ``context_name``: a model name with exactly one ``@ctx<N>``, the context limit actually used.
- ``ladder_key``/``score_key``: a ladder line and a full-context score result that ran the same model
  with the same settings have the same key.
"""

from __future__ import annotations

import json
import re
from typing import Any

# The fields of ``ModelSource`` that identify a model (``path`` never does; ``spec`` does not for a
# local folder or a GGUF file, whose hashes stand for it).
IDENTITY_FIELDS = ("spec", "kind", "revision", "file_sha256", "weights_sha256", "tokenizer_sha256",
                   "config_sha256", "attn_implementation")  # fmt: skip
LOCATED_KINDS = ("local", "gguf")
# A ladder line's own settings (``pipeline.jobs.ladder.ladder_settings``); the rest are its full
# rung's score settings, those of `make score` without ``context_limit``.
LADDER_SETTINGS = ("ladder", "ladder_setting", "tolerance", "bootstrap", "seed", "confidence", "documents")
CONTEXT_SUFFIX = re.compile(r"(@ctx\d+)+$")


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def model_identity(record: Any) -> dict[str, Any] | None:
    """The identifying fields of a model record (``IDENTITY_FIELDS``, those it has); None without one."""
    if not isinstance(record, dict) or not record:
        return None
    identity = {k: record[k] for k in IDENTITY_FIELDS if k in record}
    if identity.get("kind") in LOCATED_KINDS:
        identity.pop("spec", None)
    return identity


def model_key(record: Any) -> str | None:
    """``model_identity`` as JSON (sorted keys), or None."""
    identity = model_identity(record)
    return None if identity is None else _json(identity)


def context_name(name: str, context_limit: int | None) -> str:
    """``name`` with exactly one ``@ctx<N>`` suffix, that of ``context_limit`` (none at full context):
    a name never claims a context limit the run did not have, and never names it twice."""
    base = CONTEXT_SUFFIX.sub("", name) or name
    return base if context_limit is None else f"{base}@ctx{context_limit}"


def documents_record(scored: list[str], n_artifact: int) -> dict[str, Any]:
    """What a result's settings record of its documents: the ids scored when they are fewer than the
    artifact's (``{"documents": [...]}``), else nothing (all of them)."""
    return {"documents": list(scored)} if len(scored) < n_artifact else {}


def partial(line: dict[str, Any]) -> str | None:
    """Why a score line (a results line's JSON) is a run on part of its artifact (``"1 of 3 documents"``),
    or None when it scored all of them (or cannot tell: a line before schema 4 without ``documents``)."""
    identity = (line.get("artifact") or {}).get("identity")
    total = len(identity["documents"]) if isinstance(identity, dict) and "documents" in identity else None
    chosen = (line.get("settings") or {}).get("documents")
    if isinstance(chosen, list):
        return f"{len(chosen)} of {total if total is not None else '?'} documents"
    scored = line.get("documents")
    if total is not None and isinstance(scored, list) and len(scored) < total:
        return f"{len(scored)} of {total} documents"
    return None


def ladder_partial(line: dict[str, Any]) -> str | None:
    """Why a ladder line ran on part of its artifact (its full rung's documents), or None."""
    full = line["rungs"][-1]
    return partial({"artifact": line["artifact"], "documents": full.get("documents"), "settings": {}})


def score_key(model: str | None, settings: str | dict[str, Any]) -> str | None:
    """A full-context score result's key: its model's identity (``model_key``) and its settings but
    ``context_limit``; None for a context-limited result or one without a model record."""
    values = json.loads(settings) if isinstance(settings, str) else dict(settings)
    if values.get("context_limit") is not None or model is None:
        return None
    values.pop("context_limit", None)
    return _json([model, values])


def ladder_key(line: dict[str, Any]) -> str | None:
    """A ladder line's key: its model identity and its full rung's score settings (``score_key``)."""
    values = {k: v for k, v in line["settings"].items() if k not in LADDER_SETTINGS}
    return score_key(model_key(line.get("model")), values)
