"""Top-1 predictions at a few positions (teacher-forced accuracy), in the windows of
``logprobs.context_limited_logprobs``: the forgetting curve's and `make validate`'s retrieval accuracy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from pipeline.errors import PipelineError
from pipeline.models.logprobs import TargetScorer, Window, window_ids


def _window_of(n: int, window: int | None) -> Callable[[int], Window]:
    """The window that scores token i in ``context_limited_logprobs``: the whole sequence, the first
    window ``[0, window)``, or the sliding window whose scored range holds i."""
    if window is None or n <= window:
        return lambda i: Window(0, 1, n)
    d = window // 2
    K = window - d

    def find(i: int) -> Window:
        if i < window:
            return Window(0, 1, window)
        s = ((i - K) // d) * d  # the window starting at s scores [s + K, s + K + d)
        return Window(s, s + K, min(s + K + d, n))

    return find


@torch.inference_mode()
def top1_hits(scorer: TargetScorer, hidden: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
    """Whether each target is the model's top-1 prediction (argmax over the vocabulary, first on
    ties) from hidden states (n x hidden), over vocabulary tiles: no full-vocabulary logits for more
    than ``head_chunk`` positions of one tile."""
    hits = []
    with scorer.head_ready() as device:
        hidden, targets = hidden.to(device), targets.to(device)
        for a in range(0, len(targets), scorer.head_chunk):
            h = hidden[a : a + scorer.head_chunk]
            best = torch.full((len(h),), -torch.inf, dtype=torch.float64, device=device)
            best_id = torch.zeros(len(h), dtype=torch.long, device=device)
            for v, logits in scorer.logit_tiles(h):
                value, index = logits.to(torch.float64).max(dim=1)
                better = value > best
                best = torch.where(better, value, best)
                best_id = torch.where(better, index + v, best_id)
            hits.append(best_id == targets[a : a + scorer.head_chunk])
    return torch.cat(hits).cpu().numpy() if hits else np.zeros(0, dtype=bool)


def context_limited_top1(
    scorer: TargetScorer,
    seq: torch.Tensor,
    positions: np.ndarray,
    window: int | None,
    *,
    bos_id: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """For tokens ``seq[i]``, i in ``positions`` (i >= 1): the log-prob and whether it is the top-1
    prediction, each with the context ``context_limited_logprobs`` gives it (same windows, BOS before
    every window after the first). Only the windows that hold a position run: one forward pass
    each, so a few positions at the end of a long sequence cost one window, not the sequence."""
    positions = np.asarray(positions, dtype=np.int64)
    logprobs = np.full(len(positions), np.nan)
    hits = np.zeros(len(positions), dtype=bool)
    if len(positions) and (positions.min() < 1 or positions.max() >= len(seq)):
        raise PipelineError(
            f"positions must lie in [1, {len(seq)}) (got {positions.min()}..{positions.max()})"
        )
    find = _window_of(len(seq), window)
    groups: dict[Window, list[int]] = {}
    for k, i in enumerate(positions.tolist()):
        groups.setdefault(find(i), []).append(k)
    for w, ks in groups.items():
        prefix = [bos_id] if bos_id is not None and w.start > 0 else []
        ids = window_ids(seq, w, prefix)
        hidden = scorer.hidden_states(ids[None])[0]
        local = torch.as_tensor(positions[ks] - w.start - 1 + len(prefix))
        rows, targets = hidden[local], ids[local + 1]
        logprobs[ks] = scorer.score_hidden(rows, targets).numpy()
        hits[ks] = top1_hits(scorer, rows, targets)
    return logprobs, hits
