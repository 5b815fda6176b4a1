"""The self-check's rounding tolerance of 16-bit heads, counted exhaustively over every bfloat16 logit:
a soft-capped head's from its cap, and the float32 reductions the check runs its GEMMs with; and the
cause named when log-probs are not finite (a damaged weight, or a 16-bit overflow)."""

from __future__ import annotations

import pytest
import torch

from pipeline.errors import PipelineError
from pipeline.models.logprobs import TargetScorer
from pipeline.models.precision import full_precision_reductions, rounding_tolerance, ulp
from tests.support import build_model


def positive_bfloat16() -> torch.Tensor:
    """Every finite positive bfloat16 number, ascending."""
    values = torch.arange(1, 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    return torch.sort(values[torch.isfinite(values)].float()).values.to(torch.bfloat16)


def capped(z: torch.Tensor, c: float) -> torch.Tensor:
    """The model's soft-capping in bfloat16: /c, tanh and *c each rounded (transformers' Gemma 2)."""
    return torch.tanh(z / c) * c


def exact(z: torch.Tensor, c: float) -> torch.Tensor:
    return torch.tanh(z.double() / c) * c


CAPS = [0.5, 0.75, 1.0, 3.0, 5.0, 10.0, 20.0, 30.0, 50.0, 100.0, 125.75]


@pytest.mark.parametrize("c", CAPS)
def test_a_soft_capped_logit_moves_by_at_most_two_ulps_of_the_cap(c):
    """Two GEMMs that round z one ulp apart give capped logits at most 2 ulp(c) apart; the bfloat16
    capped logit is within 2 ulp(c) of the exact cap of any z that rounds to it (a float32 head);
    so a log-prob moves by at most twice that, which the tolerance allows, whatever the row."""
    z = positive_bfloat16()
    s = capped(z, c).double()
    neighbours = (s[1:] - s[:-1]).abs().max()
    half = ulp(z.double(), torch.bfloat16) / 2 * 0.999
    unrounded = torch.maximum(
        (s - exact(z.double() - half, c)).abs(), (s - exact(z.double() + half, c)).abs()
    )
    bound = 2 * ulp(c, torch.bfloat16)
    assert neighbours <= bound and unrounded.max() <= bound
    row = capped(torch.tensor([[1.0, c]]).to(torch.bfloat16), c)
    assert rounding_tolerance(row, softcap=c).item() >= 2 * bound.item()


def test_a_soft_capped_row_below_16_needs_the_tolerance_of_its_cap():
    """Gemma 2's cap c = 30, a row whose largest capped logit is below 16: the bfloat16 model and an
    exact (float32) head differ by more than 4 ulps of the row's largest logit (0.25, the tolerance
    of a plain head), and within that of the cap (0.5)."""
    c = 30.0
    z = positive_bfloat16()
    z = z[(capped(z, c).double() < 16) & (z.double() > 1)]
    s = capped(z, c).double()
    half = ulp(z.double(), torch.bfloat16) / 2 * 0.999
    up, down = s - exact(z.double() + half, c), s - exact(z.double() - half, c)
    t, j = int(torch.argmax(torch.maximum(up, down))), int(torch.argmin(torch.minimum(up, down)))
    # the target rounded up by the model, ten larger logits rounded down
    truth = torch.tensor([z[t].double() + (half[t] if up[t] > down[t] else -half[t])] + [0.0] * 10)
    truth[1:] = z[j].double() + (half[j] if up[j] < down[j] else -half[j])
    model_logits = capped(truth.to(torch.bfloat16), c)[None]
    model = torch.log_softmax(model_logits.double(), -1)[0, 0]
    head = torch.log_softmax(exact(truth, c).float(), -1)[0].double()
    diff = (model - head).abs().item()
    plain = rounding_tolerance(model_logits).item()
    assert plain == 4 * 0.0625 < diff <= rounding_tolerance(model_logits, softcap=c).item() == 0.5 + 1e-3


def test_a_soft_capped_bfloat16_model_passes_its_check_and_a_forgotten_cap_fails():
    """Gemma 2's cap of 30 over logits up to about 50 before the cap (weights scaled up)."""
    model = build_model("gemma2", 300, seed=3)
    model.config.final_logit_softcapping = 30.0
    with torch.no_grad():
        model.lm_head.weight.mul_(8)  # tied: the embeddings too
    model = model.to(torch.bfloat16)
    for head_dtype in (torch.bfloat16, torch.float32):
        TargetScorer(model, head_chunk=5, vocab_tile=64, head_dtype=head_dtype).check_against_full_forward()
    scorer = TargetScorer(model, head_chunk=5, vocab_tile=64)
    scorer.post = lambda logits: logits
    with pytest.raises(PipelineError, match="output head"):
        scorer.check_against_full_forward()


def test_the_check_runs_with_float32_reductions_and_restores_the_setting(monkeypatch):
    matmul = torch.backends.cuda.matmul
    before = (matmul.allow_bf16_reduced_precision_reduction, matmul.allow_fp16_reduced_precision_reduction)
    assert before == (True, True)  # torch's default
    model = build_model("llama", 97).to(torch.bfloat16)
    seen = []
    forward = type(model).forward

    def spy(self, *args, **kwargs):
        seen.append(
            (matmul.allow_bf16_reduced_precision_reduction, matmul.allow_fp16_reduced_precision_reduction)
        )
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(type(model), "forward", spy)
    TargetScorer(model, head_dtype=torch.float32).check_against_full_forward()
    assert seen == [(False, False)]
    assert (
        matmul.allow_bf16_reduced_precision_reduction,
        matmul.allow_fp16_reduced_precision_reduction,
    ) == before
    assert matmul.allow_bf16_reduced_precision_reduction_split_k is True
    with pytest.raises(RuntimeError), full_precision_reductions():
        raise RuntimeError("restored on the way out too")
    assert matmul.allow_bf16_reduced_precision_reduction is True


def test_a_damaged_weight_is_named_not_blamed_on_float16_overflow(held):
    """A coarsely damaged checkpoint (a run of NaN weights) in float32 was blamed on float16 overflow."""
    import torch

    from pipeline.models.precision import non_finite_cause

    model, _ = held
    damaged = build_model("llama", model.config.vocab_size)
    with torch.no_grad():
        damaged.model.layers[0].mlp.down_proj.weight[:4] = float("nan")
    said = non_finite_cause(damaged, torch.float32)
    assert said.startswith("its weight model.layers.0.mlp.down_proj.weight holds NaN or infinite values")
    assert "overflow" not in said
    assert non_finite_cause(model, torch.float32).startswith(
        "its weights are finite and float32 is no 16-bit"
    )
    assert non_finite_cause(model, torch.float16).startswith("overflow in a 16-bit dtype? (float16;")
