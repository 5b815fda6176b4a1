"""One document of the score stage: the evaluated model's tokens of the artifact's text and their
log-probs (one forward pass, or windows of ``context_limit`` tokens), then every metric's sums from
the evaluator's key spans and soft weights carried onto those tokens (``pipeline.text.alignment``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from pipeline.artifact.reader import ArtifactDocument
from pipeline.errors import PipelineError
from pipeline.models.loading import LoadedModel
from pipeline.models.logprobs import TargetScorer, context_limited_logprobs
from pipeline.models.precision import first_non_finite, non_finite_cause
from pipeline.score import bpb
from pipeline.score.sums import DocumentScore, Sums, grid_label
from pipeline.settings import ScoreSettings
from pipeline.text import alignment
from pipeline.text.tokenization import encode_with_offsets


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
    sequence = model_sequence(lm, doc, settings)
    return sequence_logprobs(lm, scorer, sequence, settings.context_limit, doc.doc_id)


@dataclass
class ModelSequence:
    """The evaluated model's tokens of one text as a pass takes them (``model_sequence``)."""

    text: str
    n_tokens: int  # tokens of the whole text
    seq: torch.Tensor  # the tokens scored, after the BOS when one is prepended
    offsets: np.ndarray  # (n, 2) character spans of the text tokens in ``seq``
    bos: int | None  # the BOS prepended, or None
    truncated: bool

    @property
    def n_prefix(self) -> int:
        return 0 if self.bos is None else 1


def model_sequence(lm: LoadedModel, doc: ArtifactDocument, settings: ScoreSettings) -> ModelSequence:
    """``doc.text`` in the evaluated model's tokens, BOS first when asked; a text longer than the
    model's context is an error, or its prefix that fits (``allow_truncation``, flagged)."""
    return fitted_sequence(lm, doc.doc_id, whole_sequence(lm, doc, settings.add_bos), settings)


def whole_sequence(lm: LoadedModel, doc: ArtifactDocument, add_bos: bool) -> ModelSequence:
    """``doc.text`` in the evaluated model's tokens, BOS first when asked, however long."""
    enc = encode_with_offsets(lm.tokenizer, doc.text)
    bos = lm.bos_token_id if add_bos else None
    prefix = [] if bos is None else [bos]
    seq = torch.tensor(prefix + enc.ids.tolist(), dtype=torch.long)
    return ModelSequence(doc.text, len(enc.ids), seq, enc.offsets, bos, truncated=False)


def fitted_sequence(
    lm: LoadedModel, doc_id: str, whole: ModelSequence, settings: ScoreSettings
) -> ModelSequence:
    """A whole sequence as a pass at ``settings.context_limit`` takes it: itself when it fits the model's
    context or windows bound it; else an error, or its prefix that fits (``allow_truncation``)."""
    limit = _length_limit(lm, settings, whole.n_prefix)
    if limit is None or len(whole.seq) <= limit:
        return whole
    if not settings.allow_truncation:
        raise PipelineError(
            f"document '{doc_id}' has {len(whole.seq)} tokens for {lm.source.spec}, more than its "
            f"context of {limit}: pass context_limit=<tokens> to score with a sliding window, or "
            "allow_truncation=true to score the prefix that fits (flagged per document)"
        )
    kept = limit - whole.n_prefix
    return replace(whole, seq=whole.seq[:limit].clone(), offsets=whole.offsets[:kept], truncated=True)


def sequence_logprobs(
    lm: LoadedModel, scorer: TargetScorer, sequence: ModelSequence, context_limit: int | None, doc_id: str
) -> ModelTokens:
    """The log-probs of a sequence's text tokens with at most ``context_limit`` tokens of context
    (None: all before them); a non-finite one is an error."""
    logprobs = context_limited_logprobs(scorer, sequence.seq, context_limit, bos_id=sequence.bos)
    logprobs = logprobs[sequence.n_prefix :]
    check_finite(logprobs, 0 if sequence.n_prefix else 1, doc_id, lm)
    return ModelTokens(
        sequence.text,
        sequence.n_tokens,
        offsets=sequence.offsets,
        logprobs=logprobs,
        truncated=sequence.truncated,
    )


def score_tokens(doc: ArtifactDocument, tokens: ModelTokens, settings: ScoreSettings) -> DocumentScore:
    """Every metric's sums of one document, from the model's log-probs and the artifact's spans."""
    if tokens.text != doc.text:
        raise PipelineError(f"document '{doc.doc_id}': the log-probs were computed on another text")
    return document_score(doc.doc_id, tokens, align_tokens(doc, tokens, settings))


@dataclass
class TokenAlignment:
    """What one document's sums take from its tokens and the artifact's spans, not from log-probs:
    the scored tokens; among them the key tokens, the soft weights and each grid pair's key tokens;
    byte and character counts (``align_tokens``)."""

    scored: np.ndarray  # (n,) bool: tokens with a log-prob (without BOS the first has none)
    key: np.ndarray  # masks and weights over the scored tokens
    has_weight: np.ndarray | None  # None: a key_spans artifact (no soft weights, no grid)
    weights: np.ndarray | None  # the weights where has_weight
    grid: dict[str, np.ndarray]
    text_bytes: int
    key_bytes: int
    key_chars: int
    covered_key_chars: int


def align_tokens(doc: ArtifactDocument, tokens: ModelTokens, settings: ScoreSettings) -> TokenAlignment:
    """The evaluator's key spans and soft weights carried onto the model's scored tokens."""
    offsets = tokens.offsets
    scored = ~np.isnan(tokens.logprobs)  # without BOS the first token is not predicted
    tok = offsets[scored]
    key = alignment.hard_key_mask(tok, doc.span_starts, doc.span_ends)
    lengths = bpb.utf8_lengths(doc.text)
    has_weight = weights = None
    grid = {}
    if doc.has_token_values:  # key spans alone (a key_spans artifact): no soft weights, no grid
        all_weights = alignment.soft_weights(tok, doc.eval_offsets, doc.soft_weight, len(doc.text))
        has_weight = ~np.isnan(all_weights)
        weights = all_weights[has_weight]
        for alpha, beta in settings.grid:
            starts, ends = doc.spans_at(alpha, beta)
            grid[grid_label(alpha, beta)] = alignment.hard_key_mask(tok, starts, ends)
    all_key = alignment.hard_key_mask(offsets, doc.span_starts, doc.span_ends)
    key_chars, covered = alignment.covered_key_chars(offsets, all_key, doc.span_starts, doc.span_ends)
    return TokenAlignment(
        scored, key, has_weight, weights, grid,
        text_bytes=bpb.text_bytes(lengths, offsets, scored),
        key_bytes=bpb.covered_bytes(lengths, tok[key]),
        key_chars=key_chars,
        covered_key_chars=covered,
    )  # fmt: skip


def document_score(doc_id: str, tokens: ModelTokens, aligned: TokenAlignment) -> DocumentScore:
    """Every metric's sums of one document from its log-probs and their alignment."""
    if not np.array_equal(~np.isnan(tokens.logprobs), aligned.scored):
        raise PipelineError(f"document '{doc_id}': the log-probs do not match the tokens aligned")
    nll = -tokens.logprobs[aligned.scored]
    result = DocumentScore(doc_id, n_tokens=tokens.n_tokens, truncated=tokens.truncated)
    result.all.add(nll)
    result.key.add(nll[aligned.key])
    result.all.bytes, result.key.bytes = aligned.text_bytes, aligned.key_bytes
    if aligned.has_weight is not None:
        result.soft.add(nll[aligned.has_weight], aligned.weights)
    for label, mask in aligned.grid.items():
        result.grid[label] = Sums()
        result.grid[label].add(nll[mask])
    result.key_chars, result.covered_key_chars = aligned.key_chars, aligned.covered_key_chars
    return result


def check_finite(logprobs: np.ndarray, first: int, doc_id: str, lm: LoadedModel) -> None:
    """A NaN or infinite log-prob from token ``first`` on (overflow in a low precision) is an error
    naming the token, never a skipped token."""
    at = first_non_finite(logprobs[first:])
    if at is not None:
        raise PipelineError(
            f"document '{doc_id}': {lm.source.spec} gives a log-probability of {logprobs[first + at]} for "
            f"its token {first + at}: {non_finite_cause(lm.model, lm.dtype)}"
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
