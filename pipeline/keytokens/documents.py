"""Which documents a keytokens run scores, and the exact text and evaluator tokens of each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.corpus import Document
from pipeline.errors import PipelineError
from pipeline.keytokens.settings import KeyTokenSettings
from pipeline.tokenization import encode_truncated


@dataclass
class Prepared:
    """A document ready for scoring: the exact text scored and its evaluator tokens."""

    index: int
    doc: Document
    text: str
    ids: np.ndarray
    offsets: np.ndarray
    offsets_from: str
    truncated: bool


def prepare_documents(
    docs: list[Document], tokenizer: Any, settings: KeyTokenSettings, context: int | None, n_bos: int
) -> tuple[list[Prepared], list[dict[str, str]]]:
    """Tokenize and truncate; return (documents to score, skipped documents with reasons).

    ``context`` is the evaluator's context length (None: unknown) and ``n_bos`` the number of
    tokens put before each document (0 or 1)."""
    prepared: list[Prepared] = []
    skipped: list[dict[str, str]] = []
    for doc in docs:
        if settings.num_documents is not None and len(prepared) >= settings.num_documents:
            break
        if not doc.text.strip():
            skipped.append({"doc_id": doc.id, "reason": "empty or whitespace-only text"})
            continue
        text, enc, truncated = encode_truncated(tokenizer, doc.text, settings.max_tokens)
        reason = _skip_reason(len(enc.ids), len(enc.ids) + n_bos, settings)
        if reason:
            skipped.append({"doc_id": doc.id, "reason": reason})
            continue
        if context is not None and len(enc.ids) + n_bos > context:
            raise PipelineError(
                f"document '{doc.id}' has {len(enc.ids) + n_bos} tokens, more than the evaluator's context "
                f"of {context}: set max_tokens<={context - n_bos} to truncate (recorded per document)"
            )
        prepared.append(Prepared(len(prepared), doc, text, enc.ids, enc.offsets, enc.offsets_from, truncated))
    return prepared, skipped


def _skip_reason(n_tokens: int, n_seq: int, settings: KeyTokenSettings) -> str | None:
    if n_tokens < settings.min_tokens:
        return f"{n_tokens} tokens < min_tokens={settings.min_tokens}"
    if n_seq <= settings.K:
        return f"{n_tokens} tokens: no token has a short context (K={settings.K})"
    return None
