"""Do the key spans fit the reconstructed texts? Every span was merged from the evaluator's own token
offsets, so on the exact text it indexes each span starts on an evaluator token's start and ends on
one's end. On another text (a different decode, dataset revision or tokenizer) most do not.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.errors import PipelineError

MAX_SHIFT = 64  # the widest constant shift the diagnosis looks for, in characters


@dataclass
class DocumentBoundaries:
    """One document: its evaluator token offsets (special tokens excluded) and which spans fit."""

    offsets: np.ndarray  # (n, 2) int64
    aligned: np.ndarray  # (n_spans,) bool
    best_shift: int | None  # the shift (characters) under which most spans fit, when not 0


@dataclass
class BoundaryReport:
    tokenizer: str
    threshold: float
    n_spans: int = 0
    n_aligned: int = 0
    misaligned: list[tuple[str, int, int, str]] = field(default_factory=list)  # doc, start, end, context
    shifts: Counter = field(default_factory=Counter)  # best shift of each document with misaligned spans

    @property
    def share(self) -> float:
        return self.n_aligned / self.n_spans if self.n_spans else 1.0

    def record(self) -> dict[str, Any]:
        return {
            "tokenizer": self.tokenizer,
            "spans": self.n_spans,
            "aligned": self.n_aligned,
            "share": self.share,
            "threshold": self.threshold,
        }


def evaluator_offsets(tokenizer: Any, text: str) -> np.ndarray:
    """The evaluator's token offsets on ``text`` with its default special tokens, as the official code
    tokenizes it before merging key-token offsets; the special tokens themselves are dropped."""
    enc = tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    offsets = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    return offsets[~np.asarray(enc["special_tokens_mask"], dtype=bool)]


def fits(offsets: np.ndarray, spans: np.ndarray, shift: int = 0) -> np.ndarray:
    """Per span: does it start on a token start and end on a token end (after moving it by shift)?"""
    return np.isin(spans[:, 0] + shift, offsets[:, 0]) & np.isin(spans[:, 1] + shift, offsets[:, 1])


def check_document(offsets: np.ndarray, spans: np.ndarray) -> DocumentBoundaries:
    aligned = fits(offsets, spans)
    best = None
    if len(spans) and not aligned.all():
        counts = {s: int(fits(offsets, spans, s).sum()) for s in range(-MAX_SHIFT, MAX_SHIFT + 1) if s}
        shift = max(counts, key=lambda s: (counts[s], -abs(s)))
        best = shift if counts[shift] > aligned.sum() else None
    return DocumentBoundaries(offsets, aligned, best)


def add_document(
    report: BoundaryReport, doc_id: str, text: str, spans: np.ndarray, found: DocumentBoundaries
):
    report.n_spans += len(spans)
    report.n_aligned += int(found.aligned.sum())
    if found.best_shift is not None:
        report.shifts[found.best_shift] += 1
    for a, b in spans[~found.aligned][: 3 - len(report.misaligned)]:
        report.misaligned.append((doc_id, int(a), int(b), text[max(0, a - 12) : b + 12]))


def require(report: BoundaryReport, what: str) -> None:
    """Refuse spans that do not fit, saying how they differ."""
    if report.share >= report.threshold:
        return
    if report.shifts:
        shift, docs = report.shifts.most_common(1)[0]
        more = "more" if shift > 0 else "fewer"
        diagnosis = (
            f"in {docs} documents they fit when moved by {shift:+d} characters: the reconstructed texts have "
            f"{abs(shift)} characters {more} before them than the texts the spans index"
        )
    else:
        diagnosis = (
            "no constant shift makes them fit: the texts or the tokenizer differ from the official ones"
        )
    doc, a, b, context = report.misaligned[0]
    raise PipelineError(
        f"{what}: {100 * report.share:.1f}% of {report.n_spans} key spans start and end on "
        f"{report.tokenizer} token boundaries, below the threshold of {100 * report.threshold:g}%; "
        f"{diagnosis} (first: document {doc}, span [{a}, {b}] in {context!r}); check the dataset "
        "revision, the tokenizer that decodes input_ids and the evaluator tokenizer "
        "(data/official-key-text/README.md)"
    )
