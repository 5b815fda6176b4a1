"""The score stage: PPL, LongPPL and LongPPL-soft of any causal LM against a key-token artifact,
and their tokenizer-independent forms in bits per byte (``pipeline.score.bpb``).

Per document: the evaluated model's tokens of the artifact's text, one forward pass (or windows
of ``context_limit`` tokens), then the evaluator's key spans and soft weights carried onto those
tokens (``pipeline.alignment``). The corpus values are token-weighted: the exponential of the mean
negative log-likelihood over all scored tokens of all documents (key tokens for LongPPL, weights
for LongPPL-soft), as in the paper.

This package is also the score stage (`make score`, ``python -m pipeline.score``): ``run`` scores one
model against an artifact and appends the result to the results file (``pipeline.results``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from pipeline import alignment, keytokens
from pipeline.artifacts import NEEDS_TOKEN_VALUES, ArtifactDocument, KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.logprobs import DEFAULT_HEAD_CHUNK, DEFAULT_VOCAB_TILE, TargetScorer, context_limited_logprobs
from pipeline.models import LoadedModel
from pipeline.score import bpb
from pipeline.tokenization import encode_with_offsets


@dataclass(frozen=True)
class ScoreSettings:
    add_bos: bool = True  # prepend the model's BOS so that every text token is predicted
    context_limit: int | None = None  # at most this many tokens of context per prediction
    allow_truncation: bool = False  # score the prefix that fits the model's context (flagged)
    grid: tuple[tuple[float, float], ...] = keytokens.PAPER_GRID
    head_chunk: int = DEFAULT_HEAD_CHUNK
    vocab_tile: int | None = DEFAULT_VOCAB_TILE
    window_batch_tokens: int = 16384


@dataclass
class Sums:
    """Sufficient statistics for exp(mean NLL) over a token subset: count and NLL sum; and for bits
    per byte, the UTF-8 bytes of the subset's characters (``pipeline.score.bpb``; 0: not counted)."""

    n: float = 0.0
    nll: float = 0.0
    bytes: int = 0

    def add(self, nll: np.ndarray, weight: np.ndarray | None = None) -> None:
        if weight is None:
            self.n += float(len(nll))
            self.nll += float(nll.sum())
        else:
            self.n += float(weight.sum())
            self.nll += float((weight * nll).sum())

    def merge(self, other: Sums) -> None:
        """Adds another subset's sums (a corpus from its documents)."""
        self.n += other.n
        self.nll += other.nll
        self.bytes += other.bytes

    def perplexity(self) -> float | None:
        return math.exp(self.nll / self.n) if self.n > 0 else None

    def bits_per_byte(self) -> float | None:
        return self.nll / (math.log(2) * self.bytes) if self.bytes > 0 else None


@dataclass
class DocumentScore:
    doc_id: str
    n_tokens: int  # evaluated-model tokens of the text
    truncated: bool
    all: Sums = field(default_factory=Sums)
    key: Sums = field(default_factory=Sums)
    soft: Sums = field(default_factory=Sums)
    grid: dict[str, Sums] = field(default_factory=dict)
    key_chars: int = 0
    covered_key_chars: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "doc_id": self.doc_id,
            "ppl": self.all.perplexity(),
            "longppl": self.key.perplexity(),
            "longppl_soft": self.soft.perplexity(),
            "bpb": self.all.bits_per_byte(),
            "key_bpb": self.key.bits_per_byte(),
            "n_tokens": self.n_tokens,
            "n_scored": int(self.all.n),
            "n_key_tokens": int(self.key.n),
            "truncated": self.truncated,
            "key_chars": self.key_chars,
            "covered_key_chars": self.covered_key_chars,
            "n_bytes": self.all.bytes,
            "n_key_bytes": self.key.bytes,
        }


def grid_label(alpha: float, beta: float) -> str:
    return f"alpha={alpha:g},beta={beta:g}"


@dataclass
class ModelTokens:
    """The evaluated model's tokens of one text and their log-probs (``model_logprobs``)."""

    text: str
    n_tokens: int  # tokens of the whole text
    offsets: np.ndarray  # (n, 2) character spans of the tokens scored (a truncated text's prefix)
    logprobs: np.ndarray  # (n,) log P(token | context); NaN where not predicted
    truncated: bool


def score_document(
    lm: LoadedModel, scorer: TargetScorer, doc: ArtifactDocument, settings: ScoreSettings
) -> DocumentScore:
    """Log-probs of the evaluated model on one text, and every metric's sums."""
    return score_tokens(doc, model_logprobs(lm, scorer, doc, settings), settings)


def model_logprobs(
    lm: LoadedModel, scorer: TargetScorer, doc: ArtifactDocument, settings: ScoreSettings
) -> ModelTokens:
    """The evaluated model's tokens of ``doc.text`` and their log-probs: the model's part of the
    score, shared by every artifact of the same text (``score_tokens``)."""
    enc = encode_with_offsets(lm.tokenizer, doc.text)
    bos = lm.bos_token_id if settings.add_bos else None
    prefix = [] if bos is None else [bos]
    ids, offsets = enc.ids, enc.offsets
    truncated = False
    limit = _length_limit(lm, settings, len(prefix))
    if limit is not None and len(prefix) + len(ids) > limit:
        if not settings.allow_truncation:
            raise PipelineError(
                f"document '{doc.doc_id}' has {len(ids) + len(prefix)} tokens for {lm.source.spec}, "
                f"more than its "
                f"context of {limit}: pass context_limit=<tokens> to score with a sliding window, or "
                "allow_truncation=true to score the prefix that fits (flagged per document)"
            )
        truncated = True
        ids, offsets = ids[: limit - len(prefix)], offsets[: limit - len(prefix)]
    seq = torch.tensor(prefix + ids.tolist(), dtype=torch.long)
    logprobs = context_limited_logprobs(
        scorer, seq, settings.context_limit, bos_id=bos, window_batch_tokens=settings.window_batch_tokens
    )[len(prefix) :]
    check_finite(logprobs[0 if prefix else 1 :], doc.doc_id, lm)
    return ModelTokens(
        doc.text, n_tokens=len(enc.ids), offsets=offsets, logprobs=logprobs, truncated=truncated
    )


def score_tokens(doc: ArtifactDocument, tokens: ModelTokens, settings: ScoreSettings) -> DocumentScore:
    """Every metric's sums of one document, from the model's log-probs and the artifact's spans."""
    if tokens.text != doc.text:
        raise PipelineError(f"document '{doc.doc_id}': the log-probs were computed on another text")
    offsets, logprobs = tokens.offsets, tokens.logprobs
    scored = ~np.isnan(logprobs)  # without BOS the first token is not predicted
    nll = -logprobs[scored]
    tok = offsets[scored]
    result = DocumentScore(doc.doc_id, n_tokens=tokens.n_tokens, truncated=tokens.truncated)
    result.all.add(nll)
    key = alignment.hard_key_mask(tok, doc.span_starts, doc.span_ends)
    result.key.add(nll[key])
    lengths = bpb.utf8_lengths(doc.text)
    result.all.bytes = bpb.text_bytes(lengths, offsets, scored)
    result.key.bytes = bpb.covered_bytes(lengths, tok[key])
    if doc.has_token_values:  # key spans alone (a key_spans artifact): no soft weights, no grid
        weights = alignment.soft_weights(tok, doc.eval_offsets, doc.soft_weight, len(doc.text))
        has_weight = ~np.isnan(weights)
        result.soft.add(nll[has_weight], weights[has_weight])
        for alpha, beta in settings.grid:
            starts, ends = doc.spans_at(alpha, beta)
            result.grid[grid_label(alpha, beta)] = Sums()
            result.grid[grid_label(alpha, beta)].add(nll[alignment.hard_key_mask(tok, starts, ends)])
    all_key = alignment.hard_key_mask(offsets, doc.span_starts, doc.span_ends)
    result.key_chars, result.covered_key_chars = alignment.covered_key_chars(
        offsets, all_key, doc.span_starts, doc.span_ends
    )
    return result


def check_finite(logprobs: np.ndarray, doc_id: str, lm: LoadedModel) -> None:
    """A NaN or infinite log-prob (overflow in a low precision) is an error, never a skipped token."""
    bad = np.flatnonzero(~np.isfinite(logprobs))
    if bad.size:
        raise PipelineError(
            f"document '{doc_id}': {lm.source.spec} gives a log-probability of {logprobs[bad[0]]} for one "
            f"of its tokens (overflow in {str(lm.dtype).removeprefix('torch.')}?): try dtype=float32"
        )


def _length_limit(lm: LoadedModel, settings: ScoreSettings, n_prefix: int) -> int | None:
    """The longest sequence one forward pass may take, or None when windows keep it bounded."""
    context = lm.context_length
    if settings.context_limit is not None:
        if context is not None and settings.context_limit + n_prefix > context:
            raise PipelineError(
                f"context_limit={settings.context_limit} exceeds {lm.source.spec}'s context of {context} "
                f"tokens: set context_limit<={context - n_prefix}"
            )
        return None
    return context


def corpus_summary(scores: list[DocumentScore]) -> dict[str, Any]:
    """Token-weighted corpus values over all documents."""
    total = {name: Sums() for name in ("all", "key", "soft")}
    grid: dict[str, Sums] = {}
    for s in scores:
        for name in total:
            total[name].merge(getattr(s, name))
        for label, part in s.grid.items():
            grid.setdefault(label, Sums()).merge(part)
    key_chars = sum(s.key_chars for s in scores)
    return {
        "ppl": total["all"].perplexity(),
        "longppl": total["key"].perplexity(),
        "longppl_soft": total["soft"].perplexity(),
        "bpb": total["all"].bits_per_byte(),
        "key_bpb": total["key"].bits_per_byte(),
        "n_tokens": int(total["all"].n),
        "n_key_tokens": int(total["key"].n),
        "key_char_coverage": sum(s.covered_key_chars for s in scores) / key_chars if key_chars else None,
        "n_documents": len(scores),
        "n_truncated": sum(s.truncated for s in scores),
        "n_bytes": total["all"].bytes,
        "n_key_bytes": total["key"].bytes,
        "grid": {k: {"longppl": v.perplexity(), "n_key_tokens": int(v.n)} for k, v in grid.items()},
    }


def unavailable_metrics(artifact: KeyTokenArtifact) -> dict[str, str]:
    """Why a metric is null for this artifact, by name (empty when every metric is computed)."""
    if artifact.has_token_values:
        return {}
    return {
        "longppl_soft": f"LongPPL-soft {NEEDS_TOKEN_VALUES}",
        "grid": f"the alpha/beta grid {NEEDS_TOKEN_VALUES}",
    }


def official_mean(documents: list[dict[str, Any]]) -> dict[str, float | None]:
    """The corpus values as the official ``perplexity.py`` reports them: per-document PPL weighted by
    the document's token count, per-document LongPPL by its key-token count (not the exponential of
    the pooled mean NLL that ``corpus_summary`` gives; by Jensen's inequality never smaller)."""
    out: dict[str, float | None] = {}
    for metric, weight in (("ppl", "n_tokens"), ("longppl", "n_key_tokens")):
        pairs = [(d[metric], d[weight]) for d in documents if d[metric] is not None and d[weight]]
        total = sum(w for _, w in pairs)
        out[metric] = sum(v * w for v, w in pairs) / total if total else None
    return out


def settings_dict(settings: ScoreSettings) -> dict[str, Any]:
    out = asdict(settings)
    out["grid"] = [list(g) for g in settings.grid]
    return out
