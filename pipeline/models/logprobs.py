"""Log-probabilities of target tokens, computed without full-vocabulary logits for a whole sequence.

The body of the model runs once over a sequence and yields hidden states (sequence x hidden, small);
the output head then runs only on the positions whose next-token log-prob is needed, in chunks of
``head_chunk`` positions, so memory is O(head_chunk x vocabulary) whatever the sequence length.

Stage 1 uses two passes built on this (paper, Appendix A.1, Eq. 8):

- the long pass: one forward over the whole sequence, every token conditioned on all before it;
- the short passes: windows ``seq[s : s + K + d]`` for ``s = d, 2d, ...`` score their last ``d``
  tokens (the last window is partial), so each token has between K and K + d - 1 tokens of context.
  Tokens ``K .. K + d - 1`` fall in the window starting at 0, whose context *is* the full context:
  their short log-prob equals the long one and is taken from the long pass. Tokens before position
  K have no short context.

Positions are indices into ``seq``: the text's tokens, after a BOS token when one is prepended.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pipeline.errors import PipelineError
from pipeline.models import compilation
from pipeline.models.float32_head import float32_logits, float32_output_supported
from pipeline.models.gguf import default_cache_dir
from pipeline.models.loading import LoadedModel, resolve_head_dtype
from pipeline.models.pairing import check_token_ids, embedding_rows
from pipeline.models.placement import execution_device, loaded_weights, one_thread_on_cpu
from pipeline.models.precision import full_precision_reductions, non_finite_cause, rounding_tolerance
from pipeline.settings import DEFAULT_HEAD_CHUNK, DEFAULT_VOCAB_TILE, DEFAULT_WINDOW_BATCH_TOKENS, Compute


def _head_postprocess(config) -> Callable[[torch.Tensor], torch.Tensor]:
    """The architecture-specific transform a causal LM applies to the output head's logits."""
    softcap = getattr(config, "final_logit_softcapping", None)
    scale = getattr(config, "logit_scale", None)  # Cohere multiplies
    scaling = getattr(config, "logits_scaling", None)  # Granite divides

    def post(logits: torch.Tensor) -> torch.Tensor:
        if scale is not None:
            logits = logits * scale
        if scaling is not None:
            logits = logits / scaling
        if softcap is not None:
            logits = torch.tanh(logits / softcap) * softcap
        return logits

    return post


def _logsumexp_inplace(logits: torch.Tensor) -> torch.Tensor:
    """Row-wise logsumexp that reuses ``logits`` as its workspace (one chunk of memory, not two)."""
    peak = logits.amax(dim=1, keepdim=True)
    return logits.sub_(peak).exp_().sum(dim=1).log_() + peak.squeeze(1)


class TargetScorer:
    """Computes log P(seq[p + 1] | seq[: p + 1]) for chosen positions p of one or more sequences.

    Inputs go to the device of the input embeddings, hidden states to the output head's (a device
    map may spread them; ``pipeline.models.placement``). ``head_dtype``: the head's dtype (None: its own,
    as the model's forward; float32 keeps a 16-bit model's logits unrounded before the log-softmax).
    ``window_batch_tokens``: short windows of equal length are batched up to about this many tokens.
    Every command builds its scorer from its compute settings (``scorer_for``).
    """

    def __init__(
        self,
        model,
        head_chunk: int = DEFAULT_HEAD_CHUNK,
        vocab_tile: int | None = DEFAULT_VOCAB_TILE,
        head_dtype: torch.dtype | None = None,
        window_batch_tokens: int = DEFAULT_WINDOW_BATCH_TOKENS,
    ):
        self.model = model
        self.body = model.get_decoder() if hasattr(model, "get_decoder") else model.base_model
        self.head = model.get_output_embeddings()
        if self.head is None:
            raise PipelineError(f"{type(model).__name__} has no output head: not a causal language model")
        self.post = _head_postprocess(model.config)
        self.head_chunk = max(1, int(head_chunk))
        # A plain linear head is computed from its weight, in vocabulary tiles with an online
        # logsumexp: each block of logits stays small enough for the cache (faster, and less
        # memory). None: head_chunk x vocabulary. Any other head is called as a module.
        self.linear = isinstance(self.head, torch.nn.Linear)
        self.vocab_tile = vocab_tile if self.linear else None
        self.vocab_size = self.head.weight.shape[0]
        self.head_dtype = head_dtype or self.head.weight.dtype
        self.input_device = execution_device(model.get_input_embeddings())
        self.embedding_rows = embedding_rows(model)
        self.window_batch_tokens = window_batch_tokens
        # A float32 head over 16-bit weights as one GEMM with float32 output where the device has it
        # (``uses_float32_output``); False: always on upcast operands (benchmarks compare the two).
        self.float32_output = True
        self.compute: Compute | None = None  # the settings it was built with (``scorer_for``)

    @torch.inference_mode()
    def hidden_states(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Final hidden states (batch x length x hidden) of the model's body; a token id without an
        embedding is an error (a tokenizer that is not the model's)."""
        check_token_ids(input_ids, self.embedding_rows)
        out = self.body(input_ids=input_ids.to(self.input_device), use_cache=False)
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]

    @contextmanager
    def head_ready(self) -> Iterator[torch.device]:
        """The head's device, an offloaded head's weights loaded there for the block (``logit_tiles``)."""
        if not self.linear:
            yield execution_device(self.head)
            return
        with loaded_weights(self.head):
            yield self.head.weight.device

    @torch.inference_mode()
    def score_hidden(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Log-probs of ``targets`` (n,) given hidden states (n x hidden), chunk by chunk, float64.

        The log-softmax is taken in float32 (float64 for a float64 model); one copy to the host per call.
        """
        work_dtype = torch.float64 if hidden.dtype == torch.float64 else torch.float32
        pieces = []
        with self.head_ready() as device:
            hidden, targets = hidden.to(device), targets.to(device)
            for a in range(0, len(targets), self.head_chunk):
                b = min(a + self.head_chunk, len(targets))
                if self.vocab_tile is None or self.vocab_tile >= self.vocab_size:
                    logits = next(self.logit_tiles(hidden[a:b]))[1].to(work_dtype)
                    picked = logits.gather(1, targets[a:b, None]).squeeze(1)
                    pieces.append(picked - _logsumexp_inplace(logits))
                else:
                    pieces.append(self._tiled(hidden[a:b], targets[a:b], work_dtype))
        if not pieces:
            return torch.empty(0, dtype=torch.float64)
        return torch.cat(pieces).to("cpu", torch.float64)

    def logit_tiles(self, hidden: torch.Tensor) -> Iterator[tuple[int, torch.Tensor]]:
        """(first vocabulary id, logits) of each vocabulary tile (one tile if ``vocab_tile`` is None), on
        the head's device, in ``head_dtype``. Call it inside ``head_ready()``."""
        if not self.linear:
            yield 0, self.post(self.head(hidden))
            return
        weight, bias = self.head.weight, self.head.bias
        if weight.device.type == "meta":
            raise PipelineError("the output head is offloaded: call logit_tiles inside head_ready()")
        hidden = hidden.to(weight.device)
        mixed = self.uses_float32_output(hidden)
        if not mixed:
            hidden = hidden.to(self.head_dtype)
        tile = self.vocab_tile or self.vocab_size
        for v in range(0, self.vocab_size, tile):
            w = slice(v, v + tile)
            if mixed:
                logits = float32_logits(hidden, weight[w], None if bias is None else bias[w])
            else:
                b = None if bias is None else bias[w].to(self.head_dtype)
                logits = torch.nn.functional.linear(hidden, weight[w].to(self.head_dtype), b)
            yield v, self.post(logits)

    def uses_float32_output(self, hidden: torch.Tensor) -> bool:
        """Whether the float32 head runs as a 16-bit GEMM with float32 accumulation and output
        (``float32_logits``) rather than on upcast operands: a float32 head over 16-bit weights and
        hidden states of their dtype, where the device has the operation (CUDA) and
        ``float32_output`` is on."""
        weight = self.head.weight
        return (
            self.float32_output
            and self.head_dtype == torch.float32
            and hidden.dtype == weight.dtype
            and (self.head.bias is None or self.head.bias.dtype == weight.dtype)
            and float32_output_supported(weight.device, weight.dtype)
        )

    def _tiled(self, hidden: torch.Tensor, targets: torch.Tensor, work_dtype: torch.dtype) -> torch.Tensor:
        """Target log-probs over vocabulary tiles (running max and sum of exponentials), no host sync."""
        n = len(targets)
        running_max = torch.full((n,), -torch.inf, dtype=work_dtype, device=hidden.device)
        running_sum = torch.zeros(n, dtype=work_dtype, device=hidden.device)
        picked = torch.zeros(n, dtype=work_dtype, device=hidden.device)
        for v, logits in self.logit_tiles(hidden):
            logits = logits.to(work_dtype)
            local = targets - v
            inside = (local >= 0) & (local < logits.shape[1])
            value = logits.gather(1, local.clamp(0, logits.shape[1] - 1)[:, None]).squeeze(1)
            picked = torch.where(inside, value, picked)
            tile_max = torch.maximum(running_max, logits.amax(dim=1))
            tile_sum = logits.sub_(tile_max[:, None]).exp_().sum(dim=1)
            running_sum = running_sum * torch.exp(running_max - tile_max) + tile_sum
            running_max = tile_max
        return picked - (running_sum.log() + running_max)

    def score(self, seq: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """log P(seq[p + 1] | seq[: p + 1]) for each position p, one forward pass over ``seq``."""
        hidden = self.hidden_states(seq[None])[0]
        return self.score_hidden(hidden[positions.to(hidden.device)], seq[positions + 1])

    def check_against_full_forward(self, length: int = 12) -> None:
        """Guard: the chunked head must reproduce the model's own logits on a short probe, up to
        rounding (``rounding_tolerance``, of a soft-capped head counted from its cap). The model's
        logits come from its head in its own dtype; this head is checked in that dtype too (like with
        like), and in ``head_dtype`` if other. 16-bit GEMMs reduce in float32 meanwhile
        (``full_precision_reductions``), so that each logit is one rounding of its sum."""
        seq = torch.arange(length, dtype=torch.long) * 7919 % self.vocab_size
        positions = torch.arange(length - 1)
        with full_precision_reductions(), one_thread_on_cpu(self.input_device):
            with torch.inference_mode():
                logits = self.model(input_ids=seq[None].to(self.input_device), use_cache=False).logits[0, :-1]
            ref = torch.log_softmax(logits.double().cpu(), -1).gather(1, seq[1:, None]).squeeze(1)
            if not torch.isfinite(ref).all():
                raise PipelineError(
                    f"{type(self.model).__name__} gives non-finite log-probs for a {length}-token probe in "
                    f"{logits.dtype}: {non_finite_cause(self.model, logits.dtype)}"
                )
            tolerance = rounding_tolerance(
                logits, getattr(self.model.config, "final_logit_softcapping", None)
            )
            like = TargetScorer(
                self.model, self.head_chunk, self.vocab_tile, logits.dtype, self.window_batch_tokens
            )
            for scorer in (like, self) if self.head_dtype != logits.dtype else (self,):
                diff = (scorer.score(seq, positions) - ref).abs()
                if not (diff <= tolerance.cpu()).all():
                    raise PipelineError(
                        f"{type(self.model).__name__}: chunked log-probs (head in {scorer.head_dtype}) "
                        f"differ from the model's own logits by {diff.max().item():.2e}, more than "
                        "rounding explains; its output head does something this pipeline does not know"
                    )


def scorer_for(
    model: LoadedModel | torch.nn.Module, compute: Compute, texts: int | None = None
) -> TargetScorer:
    """The scorer of a model (loaded, or a module with its weights) under ``compute``: its head
    blocks, head dtype (resolved for the model's dtype and device), window batches and, where
    ``compute.compile`` asks for it for a run of ``texts`` texts, its decoder layers compiled
    (``pipeline.models.compilation``). Every model a command or the Python API runs is scored through
    one."""
    if isinstance(model, LoadedModel):
        module, dtype, device = model.model, model.dtype, model.device
    else:
        parameter = next(model.parameters())
        module, dtype, device = model, parameter.dtype, parameter.device
    if compilation.wanted(compute.compile, device, texts, bool(getattr(module, "hf_device_map", None))):
        compilation.compile_layers(
            module, Path(compute.cache_dir) if compute.cache_dir else default_cache_dir()
        )
    head_dtype = resolve_head_dtype(compute.head_dtype, dtype, device)
    scorer = TargetScorer(
        module, compute.head_chunk, compute.vocab_tile, head_dtype, compute.window_batch_tokens
    )
    scorer.compute = compute  # what results record of how it scored
    return scorer


@dataclass(frozen=True)
class Window:
    """One short-context pass: ``seq[start:end]`` (BOS-prefixed if asked) scores ``[first, end)``."""

    start: int
    first: int
    end: int


def short_windows(n: int, K: int, d: int) -> list[Window]:
    """The sliding windows of paper Eq. 8 over a sequence of n tokens, without the one starting at 0
    (whose context is the whole prefix: its tokens take their long log-prob)."""
    if K < 1 or d < 1:
        raise PipelineError(f"K and d must be positive (got K={K}, d={d})")
    return [Window(s, s + K, min(s + K + d, n)) for s in range(d, max(n - K, 0), d)]


@dataclass
class PassResult:
    long: np.ndarray  # float64, (n,): log P(seq[i] | seq[:i]); NaN at i = 0
    short: np.ndarray  # float64, (n,): short-context log-prob; NaN where no short context


def full_context_logprobs(scorer: TargetScorer, seq: torch.Tensor) -> np.ndarray:
    """log P(seq[i] | seq[:i]) for every i (NaN at 0): one forward pass."""
    out = np.full(len(seq), np.nan)
    if len(seq) >= 2:
        out[1:] = scorer.score(seq, torch.arange(len(seq) - 1)).numpy()
    return out


def sliding_window_logprobs(
    scorer: TargetScorer,
    seq: torch.Tensor,
    K: int,
    d: int,
    first_window: np.ndarray,
    *,
    bos_id: int | None = None,
    progress: Callable[[Iterator], Iterator] | None = None,
) -> np.ndarray:
    """Short-context log-probs (paper Eq. 8) of every token of ``seq``; NaN before position K.

    ``first_window`` holds full-context log-probs of at least the first K + d tokens: the window
    starting at 0 is the full context, so its tokens take those values. ``bos_id``: when given,
    every other window is prefixed with it, so the short context reads like the start of a
    document. Windows of equal length are batched up to about ``scorer.window_batch_tokens`` tokens.
    """
    n = len(seq)
    short = np.full(n, np.nan)
    first_short = min(K + d, n)
    short[K:first_short] = first_window[K:first_short]
    prefix = [] if bos_id is None else [bos_id]
    groups = _batches(short_windows(n, K, d), scorer.window_batch_tokens, K + d + len(prefix))
    for group in progress(groups) if progress else groups:
        batch = torch.stack([window_ids(seq, w, prefix) for w in group])
        hidden = scorer.hidden_states(batch)
        rows, targets = [], []
        for b, w in enumerate(group):
            local = torch.arange(w.first - w.start - 1, w.end - w.start - 1) + len(prefix)
            rows.append(hidden[b, local])
            targets.append(batch[b, local + 1])
        values = scorer.score_hidden(torch.cat(rows), torch.cat(targets)).numpy()
        at = 0
        for w in group:
            short[w.first : w.end] = values[at : at + w.end - w.first]
            at += w.end - w.first
    return short


def long_and_short_logprobs(
    scorer: TargetScorer,
    seq: torch.Tensor,
    K: int,
    d: int,
    *,
    bos_id: int | None = None,
    progress: Callable[[Iterator], Iterator] | None = None,
) -> PassResult:
    """Stage 1's two passes over ``seq``: full-context and sliding-window short-context log-probs."""
    long = full_context_logprobs(scorer, seq)
    short = sliding_window_logprobs(scorer, seq, K, d, long, bos_id=bos_id, progress=progress)
    return PassResult(long=long, short=short)


def context_limited_logprobs(
    scorer: TargetScorer,
    seq: torch.Tensor,
    window: int | None,
    *,
    bos_id: int | None = None,
) -> np.ndarray:
    """log P(seq[i] | seq[:i]) for every i (NaN at 0), with at most ``window`` tokens of context.

    ``window=None``, or a sequence that fits, is one forward pass. Otherwise windows of ``window``
    tokens advance by ``window // 2`` and score their second half (the first window scores all of
    its tokens), so every token sees between ``window // 2`` and ``window`` tokens, never more: the
    stage 1 short pass with K = window - window // 2 and d = window // 2. ``bos_id`` prefixes
    every window after the first.
    """
    if window is None or len(seq) <= window:
        return full_context_logprobs(scorer, seq)
    if window < 2:
        raise PipelineError(f"context_limit must be at least 2 tokens (got {window})")
    d = window // 2
    first = full_context_logprobs(scorer, seq[:window])
    out = sliding_window_logprobs(scorer, seq, window - d, d, first, bos_id=bos_id)
    out[:window] = first
    return out


def window_ids(seq: torch.Tensor, w: Window, prefix: list[int]) -> torch.Tensor:
    body = seq[w.start : w.end]
    return torch.cat([torch.tensor(prefix, dtype=seq.dtype), body]) if prefix else body


def _batches(windows: list[Window], budget_tokens: int, window_len: int) -> list[list[Window]]:
    """Group windows of equal length (all but a partial last one) into batches within the budget."""
    per_batch = max(1, budget_tokens // max(window_len, 1))
    groups: list[list[Window]] = []
    for w in windows:
        last = groups[-1] if groups else None
        same_len = last is not None and (last[0].end - last[0].start) == (w.end - w.start)
        if last is not None and same_len and len(last) < per_batch:
            last.append(w)
        else:
            groups.append([w])
    return groups
