"""One document of the score stage: the evaluated model's tokens of the artifact's text and their
log-probs (one forward pass, or windows of ``context_limit`` tokens), then every metric's sums from
the evaluator's key spans and soft weights carried onto those tokens (``pipeline.text.alignment``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from pipeline.artifact.reader import ArtifactDocument
from pipeline.errors import PipelineError
from pipeline.models.loading import LoadedModel, dtype_name
from pipeline.models.logprobs import TargetScorer, context_limited_logprobs
from pipeline.models.precision import first_non_finite
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
    logprobs = context_limited_logprobs(scorer, seq, settings.context_limit, bos_id=bos)[len(prefix) :]
    check_finite(logprobs, 0 if prefix else 1, doc.doc_id, lm)
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


def check_finite(logprobs: np.ndarray, first: int, doc_id: str, lm: LoadedModel) -> None:
    """A NaN or infinite log-prob from token ``first`` on (overflow in a low precision) is an error
    naming the token, never a skipped token."""
    at = first_non_finite(logprobs[first:])
    if at is not None:
        raise PipelineError(
            f"document '{doc_id}': {lm.source.spec} gives a log-probability of {logprobs[first + at]} for "
            f"its token {first + at} (overflow in {dtype_name(lm.dtype)}?): try dtype=float32"
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
