"""A full-attention layer's keys and values written in place while decoding.

transformers' ``DynamicLayer`` concatenates each new token's keys and values onto the whole cache, so
every decoding step copies all of it: at LooGLE's 8k to 32k prompts that copy, per question and
per step, costs about as much as the attention itself (docs/reports/loogle.md). ``InPlaceLayer`` holds
the batch's keys and values in a buffer with room for the answers' new tokens, writes each step into
it and hands attention views of the tokens so far: the same keys and values, never copied again.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer


class InPlaceLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values live in a buffer of ``capacity`` positions, written in
    place; ``keys`` and ``values`` are views of its first ``length`` positions."""

    def __init__(self, buffers: tuple[torch.Tensor, torch.Tensor], length: int) -> None:
        super().__init__()
        self.buffers = buffers
        self.dtype, self.device, self.is_initialized = buffers[0].dtype, buffers[0].device, True
        self.show(length)

    @classmethod
    def empty(
        cls, like: tuple[torch.Tensor, torch.Tensor], size: int, length: int, room: int
    ) -> InPlaceLayer:
        """A batch of ``size`` sequences of ``length`` positions (filled by ``place``) with ``room``
        positions after them, with the heads, width and dtype of ``like``'s keys and values."""
        buffers = tuple(
            states.new_empty(size, *states.shape[1:-2], length + room, states.shape[-1]) for states in like
        )
        return cls(buffers, length)

    def place(self, row: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """One sequence's keys and values (``(1, heads, n, dim)``) as batch row ``row``, left-padded with
        zeros to the batch's length (the padding is masked; zeros keep it finite)."""
        for buffer, states in zip(self.buffers, (keys, values), strict=True):
            pad = self.length - states.shape[-2]
            buffer[row, :, :pad] = 0
            buffer[row, :, pad : self.length] = states[0]

    def show(self, length: int) -> None:
        """Point ``keys`` and ``values`` at the buffers' first ``length`` positions."""
        self.length = length
        self.keys, self.values = (buffer[:, :, :length] for buffer in self.buffers)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write the new tokens' keys and values after the others (the buffers doubled when full); all
        of them, as views."""
        end = self.length + key_states.shape[-2]
        if end > self.buffers[0].shape[-2]:
            self.buffers = tuple(self.widened(buffer, 2 * end) for buffer in self.buffers)
        self.buffers[0][:, :, self.length : end] = key_states
        self.buffers[1][:, :, self.length : end] = value_states
        self.show(end)
        return self.keys, self.values

    @staticmethod
    def widened(buffer: torch.Tensor, capacity: int) -> torch.Tensor:
        wider = buffer.new_empty(*buffer.shape[:-2], capacity, buffer.shape[-1])
        wider[:, :, : buffer.shape[-2]] = buffer
        return wider

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the sequences ``indices`` (the others' answers ended)."""
        self.buffers = tuple(buffer[indices] for buffer in self.buffers)
        self.show(self.length)

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("InPlaceLayer is for greedy decoding: it is never cropped")

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("InPlaceLayer is for greedy decoding: it is never repeated")
