"""How far two correct computations of the same log-probs may differ in a given precision."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch


def ulp(value: torch.Tensor | float, dtype: torch.dtype) -> torch.Tensor:
    """One unit in the last place of ``dtype`` at |value| (0.0625 in bfloat16 for [8, 16))."""
    value = torch.as_tensor(value, dtype=torch.float64).abs().clamp_min(torch.finfo(dtype).tiny)
    return torch.finfo(dtype).eps * torch.exp2(torch.floor(torch.log2(value)))


def rounding_tolerance(logits: torch.Tensor, softcap: float | None = None) -> torch.Tensor:
    """How far two correct computations of the log-probs of these logits (rows) may differ: 1e-9 in
    float64, 1e-3 in float32. 16-bit logits are rounded to 16 bits, differently by GEMMs of other
    shapes (by one ulp when both accumulate in float32: ``full_precision_reductions``).

    A plain head: each logit moves by up to one ulp of the row's largest |logit|, so a log-prob (a
    logit minus the row's logsumexp, which moves by at most the largest move) by two; the tolerance
    is four. A soft-capped head (``softcap`` c: s = c tanh(z / c), each of /c, tanh and *c rounded
    in 16 bits, as the model's forward does) is counted from c, not from the row: a GEMM ulp of z
    moves s by up to two ulp(c) after the three roundings, and the 16-bit s is within 1.51 ulp(c) of
    the exact value of an unrounded z (a float32 head), both found exhaustively over every bfloat16
    z for c in [0.5, 128) (tests/models/test_precision.py); so a log-prob moves by up to 4 ulp(c) (0.5 at
    Gemma 2's c = 30), plus the float32 allowance for the log-softmax."""
    rows = logits.shape[0]
    if logits.dtype == torch.float64:
        return torch.full((rows,), 1e-9, dtype=torch.float64)
    if logits.dtype == torch.float32:
        return torch.full((rows,), 1e-3, dtype=torch.float64)
    if softcap is not None:
        return torch.full((rows,), 4 * ulp(softcap, logits.dtype).item() + 1e-3, dtype=torch.float64)
    return 4 * ulp(logits.double().abs().amax(dim=1), logits.dtype)


@contextmanager
def full_precision_reductions() -> Iterator[None]:
    """Within the block, cuBLAS reduces 16-bit GEMMs in float32 (split-K too): with the default
    (``allow_bf16_reduced_precision_reduction`` on) it may sum split-K partial results in bfloat16,
    moving a narrow GEMM's outputs by several ulps, which no tolerance of one rounding covers."""
    matmul = torch.backends.cuda.matmul
    saved = {
        name: (getattr(matmul, name), getattr(matmul, f"{name}_split_k"))
        for name in ("allow_bf16_reduced_precision_reduction", "allow_fp16_reduced_precision_reduction")
    }
    try:
        for name in saved:
            setattr(matmul, name, (False, True))
        yield
    finally:
        for name, value in saved.items():
            setattr(matmul, name, value)


def first_non_finite(values: np.ndarray) -> int | None:
    """The index of the first NaN or infinite value (overflow in a low precision), None if none."""
    bad = np.flatnonzero(~np.isfinite(values))
    return int(bad[0]) if bad.size else None


def non_finite_cause(model: torch.nn.Module, dtype: torch.dtype) -> str:
    """Why a model gives a NaN or an infinite log-prob, for the error that reports one: overflow in a
    16-bit dtype (of an activation, or of a weight cast to it), else a weight that is itself NaN or
    infinite (a damaged checkpoint), else neither."""
    damaged = next(
        (n for n, p in model.named_parameters() if p.is_floating_point() and not torch.isfinite(p).all()),
        None,
    )
    name = str(dtype).removeprefix("torch.")
    if dtype in (torch.float16, torch.bfloat16):
        weight = f", and its weight {damaged} is NaN or infinite in it" if damaged else ""
        return (
            f"overflow in a 16-bit dtype? ({name}{weight}; float16 overflows where bfloat16 and float32 do "
            "not): try dtype=float32"
        )
    if damaged is not None:
        return f"its weight {damaged} holds NaN or infinite values: the checkpoint is damaged; load it anew"
    return f"its weights are finite and {name} is no 16-bit dtype: check the model's config and code"
