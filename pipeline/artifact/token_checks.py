"""The tokens table against its texts and its settings: offsets that run forward through the text, and
the K, d and BOS convention that the stored log-probs show (``checks.check_artifact`` runs them).

Stage 1 scores a sequence of ``n_bos`` (0 or 1) BOS tokens and the document's tokens; a stored token
``i`` sits at sequence position ``i + n_bos``. Its long log-prob is null only at position 0 (a first
token without BOS); its short log-prob is null exactly before position K; the first short window's
context is the whole prefix, so on positions [K, K + d) the short log-prob *is* the long one, bit for
bit, and from K + d on it comes from a window that dropped d tokens of context. So the tables
determine K exactly, and d where a document reaches position K + d with a token the evaluator did not
predict with near certainty (``CERTAIN_LOGPROB``: such a token can get bitwise the same log-prob from
a shorter context).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# Above this long log-prob (probability 0.9), a short context can give bitwise the same value.
CERTAIN_LOGPROB = math.log(0.9)


def check_offsets(tokens: dict[str, np.ndarray], docs: dict[str, np.ndarray], where: Any) -> None:
    """Within a document, token starts and ends never go back, and every character that no token
    covers is whitespace (tokenizers that trim offsets leave spaces out; nothing else)."""
    doc = where.row_docs["tokens"]
    start, end = tokens["char_start"], tokens["char_end"]
    first = np.ones(len(doc), dtype=bool)
    first[1:] = doc[1:] != doc[:-1]
    previous_start = np.concatenate([[0], start[:-1]])
    previous_end = np.where(first, 0, np.concatenate([[0], end[:-1]]))
    where.fail("tokens", "char_start", ~first & (start < previous_start), "before the previous token's start")
    where.fail("tokens", "char_end", ~first & (end < previous_end), "before the previous token's end")
    texts = docs["text"]
    holes = np.flatnonzero(start > previous_end)
    bad = [i for i in holes if not texts[doc[i]][previous_end[i] : start[i]].isspace()]
    where.fail(
        "tokens",
        "char_start",
        np.isin(np.arange(len(doc)), bad[:1]),
        "leaves characters before it that no token covers and that are not whitespace",
    )
    last = np.flatnonzero(np.concatenate([first[1:], [True]])) if len(doc) else np.zeros(0, dtype=int)
    tail = [i for i in last if not (texts[doc[i]][end[i] :].isspace() or end[i] == len(texts[doc[i]]))]
    where.fail(
        "tokens",
        "char_end",
        np.isin(np.arange(len(doc)), tail[:1]),
        "the document's last token leaves characters after it that are not whitespace",
    )


def check_windows(
    settings: dict[str, Any], tokens: dict[str, np.ndarray], docs: dict[str, np.ndarray], where: Any
) -> None:
    """The BOS convention, K and d, as the stored log-probs show them (the module's docstring)."""
    K, d = settings["K"], settings["d"]
    doc, index = where.row_docs["tokens"], tokens["token_index"]
    long, short = tokens["long_logprob"], tokens["short_logprob"]
    long_null, short_null = tokens["long_logprob:null"], tokens["short_logprob:null"]
    first = index == 0
    no_log_prob = "null after a document's first token (only a first token without BOS has none)"
    where.fail("tokens", "long_logprob", long_null & ~first, no_log_prob)
    has_bos = np.zeros(len(docs["doc_id"]), dtype=bool)
    has_bos[doc[first]] = ~long_null[first]
    if not settings.get("add_bos", True):
        where.fail(
            "tokens", "long_logprob", first & ~long_null, "present at a first token, but add_bos=false"
        )
    where.fail(
        "tokens",
        "long_logprob",
        first & (~long_null != has_bos[0]),
        "null at the first token of some documents only (BOS goes before every document or none)",
    )
    position = index + has_bos[doc]
    where.fail(
        "tokens",
        "short_logprob",
        short_null != (position < K),
        f"not null exactly before sequence position K={K} (BOS counted): the log-probs were computed with "
        "another K",
    )
    window = (position >= K) & (position < K + d)
    where.fail(
        "tokens",
        "short_logprob",
        window & (short != long),
        f"differs from long_logprob in the first short window, positions [{K}, {K + d}) (its context is the "
        "whole prefix): the log-probs were computed with a smaller d",
    )
    telling = (position == K + d) & ~long_null & ~short_null & (long < CERTAIN_LOGPROB)
    if telling.any() and np.all(short[telling] == long[telling]):
        where.fail(
            "tokens",
            "short_logprob",
            telling,
            f"equals long_logprob at position K+d={K + d} in every document that tells (the second short "
            f"window starts there): the log-probs were computed with a larger d than {d}",
        )
