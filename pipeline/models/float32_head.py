"""The float32 output head of a 16-bit model as one GEMM on its 16-bit operands.

A bfloat16 model's logits rounded to bfloat16 move log-probs by about 0.05 nats, so the keytokens
stage computes the head in float32 (``head_dtype``). Upcasting the weights and hidden states runs
that GEMM on float32 units (about 50 TFLOP/s on an H100, with TF32 off); a 16-bit GEMM that
accumulates in float32 and writes float32 (``torch.mm(..., out_dtype=torch.float32)``) gives the same
products, since the product of two bfloat16 numbers is exact in float32, on tensor cores. torch 2.13
has it on CUDA devices of compute capability 8.0 and up; elsewhere (the CPU raises
NotImplementedError) the head runs on the upcast operands, as before.
"""

from __future__ import annotations

import functools

import torch


@functools.cache
def float32_output_supported(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``torch.mm(a, b, out_dtype=torch.float32)`` runs for ``dtype`` operands on ``device``:
    16-bit operands, float32 accumulation and float32 output (tensor cores). torch 2.13 has it on CUDA
    (compute capability 8.0 and up) and nowhere else: its CPU raises NotImplementedError."""
    if dtype not in (torch.bfloat16, torch.float16):
        return False
    try:
        probe = torch.ones(2, 2, dtype=dtype, device=device)
        return torch.mm(probe, probe, out_dtype=torch.float32).dtype == torch.float32
    except (NotImplementedError, RuntimeError, TypeError):
        return False


def float32_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``hidden @ weight.T + bias`` in float32 from 16-bit operands: the products of two bfloat16 (or
    float16) numbers are exact in float32, so this is the float32 computation on the upcast operands
    up to the order of the float32 sums, without upcasting the weights (a copy the size of the tile)
    and on tensor cores (about ten times the float32 rate of an H100). The bias, in the operands'
    dtype, is added in float32."""
    if bias is None:
        return torch.mm(hidden, weight.t(), out_dtype=torch.float32)
    return torch.addmm(bias, hidden, weight.t(), out_dtype=torch.float32)
