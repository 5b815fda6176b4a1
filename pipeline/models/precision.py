"""How far two correct computations of the same log-probs may differ in a given precision."""

from __future__ import annotations

import numpy as np
import torch


def rounding_tolerance(logits: torch.Tensor) -> torch.Tensor:
    """How far two correct computations of the log-probs of these logits (rows) may differ: 1e-9 in
    float64, 1e-3 in float32. 16-bit logits are rounded to 16 bits, differently by GEMMs of other
    shapes: each logit by up to one unit in the last place (ulp) of the row's largest |logit|, so
    a log-prob (a logit minus the row's logsumexp) by two; twice that covers a soft-capping applied
    in 16 bits. One bfloat16 ulp is 0.0625 for |logit| in [8, 16), 0.125 in [16, 32)."""
    rows = logits.shape[0]
    if logits.dtype == torch.float64:
        return torch.full((rows,), 1e-9, dtype=torch.float64)
    if logits.dtype == torch.float32:
        return torch.full((rows,), 1e-3, dtype=torch.float64)
    largest = logits.double().abs().amax(dim=1).clamp_min(torch.finfo(logits.dtype).tiny)
    ulp = torch.finfo(logits.dtype).eps * torch.exp2(torch.floor(torch.log2(largest)))
    return 4 * ulp


def first_non_finite(values: np.ndarray) -> int | None:
    """The index of the first NaN or infinite value (overflow in a low precision), None if none."""
    bad = np.flatnonzero(~np.isfinite(values))
    return int(bad[0]) if bad.size else None
