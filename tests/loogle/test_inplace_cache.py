"""The in-place cache layer of batched decoding (``inplace_cache.InPlaceLayer``) holds what
transformers' ``DynamicLayer`` holds after the same updates: left-padded rows, new tokens written in
place (widening when its room runs out), sequences dropped from the batch."""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from pipeline.loogle.generation.inplace_cache import InPlaceLayer


def states(length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, 2, length, 3, generator=generator, dtype=torch.float64) for _ in range(2))


@pytest.mark.parametrize("room", [0, 1, 5])
def test_the_layer_holds_what_a_dynamic_layer_holds(room):
    rows = [states(4, 0), states(2, 1), states(4, 2)]
    reference = DynamicLayer()
    padded = [tuple(torch.cat([s.new_zeros(1, 2, 4 - s.shape[-2], 3), s], dim=-2) for s in r) for r in rows]
    reference.update(torch.cat([k for k, _ in padded]), torch.cat([v for _, v in padded]))
    layer = InPlaceLayer.empty(rows[0], 3, 4, room)
    for row, (keys, values) in enumerate(rows):
        layer.place(row, keys, values)
    assert torch.equal(layer.keys, reference.keys) and torch.equal(layer.values, reference.values)
    for step in range(3):  # past the room when it is 0 or 1: the buffers widen
        new = tuple(torch.full((3, 2, 1, 3), float(step + 10 * i)) for i in range(2))
        got, want = layer.update(*new), reference.update(*new)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
        assert layer.get_seq_length() == reference.get_seq_length() == 5 + step
    kept = torch.tensor([0, 2])
    layer.batch_select_indices(kept)
    reference.batch_select_indices(kept)
    new = tuple(torch.ones(2, 2, 1, 3) for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(layer.update(*new), reference.update(*new), strict=True))


def test_the_layer_is_never_cropped_or_repeated():
    layer = InPlaceLayer.empty(states(2, 0), 1, 2, 1)
    with pytest.raises(NotImplementedError):
        layer.crop(-1)
    with pytest.raises(NotImplementedError):
        layer.batch_repeat_interleave(2)
