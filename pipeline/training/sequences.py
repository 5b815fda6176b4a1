"""Training sequences for `make finetune`: one per document, its first ``max_length`` tokens.

A sequence is the model's BOS (when it has one and ``add_bos``) and the document's tokens, cut at
``max_length`` (recorded as truncated). For the ``artifact`` weight source each sequence carries the
weight of every target token (``pipeline.training.longce.ArtifactWeights``), computed once here, so that
training pays nothing for them. Batches are padded on the right; padded targets are not scored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pipeline.errors import PipelineError
from pipeline.text.corpus import Document
from pipeline.text.tokenization import encode_with_offsets
from pipeline.training.longce import IGNORE_INDEX, ArtifactWeights


@dataclass
class TrainingSequence:
    doc_id: str
    input_ids: list[int]
    weights: list[float] | None  # per target input_ids[1:], artifact source only
    truncated: bool
    n_weighted: int = 0  # targets that carry an artifact weight (the rest have none: weight 1)

    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {"input_ids": self.input_ids}
        if self.weights is not None:
            item["longce_weights"] = self.weights
        return item


def build_sequences(
    docs: list[Document],
    tokenizer: Any,
    *,
    max_length: int,
    add_bos: bool = True,
    min_tokens: int = 2,
    weights: ArtifactWeights | None = None,
) -> tuple[list[TrainingSequence], list[dict[str, str]]]:
    """The training sequences of ``docs`` and the documents skipped (too short), with reasons."""
    if max_length < 2:
        raise PipelineError(f"max_length must be at least 2 tokens (got {max_length})")
    bos = tokenizer.bos_token_id if add_bos else None
    prefix = [] if bos is None else [int(bos)]
    sequences, skipped = [], []
    for doc in docs:
        enc = encode_with_offsets(tokenizer, doc.text)
        ids = prefix + enc.ids.tolist()
        if len(ids) < max(min_tokens, 2):
            skipped.append(
                {"doc_id": doc.id, "reason": f"{len(ids)} tokens, fewer than {max(min_tokens, 2)}"}
            )
            continue
        truncated = len(ids) > max_length
        ids = ids[:max_length]
        seq = TrainingSequence(doc.id, ids, None, truncated)
        if weights is not None:
            w = weights.token_weights(doc.id, doc.text, enc.offsets)
            # targets are ids[1:]: every text token after BOS, or all but the first without it
            w = w[: len(ids) - len(prefix)] if prefix else w[1 : len(ids)]
            seq.n_weighted = int(np.sum(~np.isnan(w)))
            seq.weights = np.where(np.isnan(w), min(1.0, weights.gamma), w).tolist()
        sequences.append(seq)
    if not sequences:
        raise PipelineError(f"no training document has at least {max(min_tokens, 2)} tokens: {skipped[:3]}")
    return sequences, skipped


class SequenceDataset(torch.utils.data.Dataset):
    def __init__(self, sequences: list[TrainingSequence]):
        self.items = [s.to_item() for s in sequences]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.items[index]


class RightPadCollator:
    """Pads a batch on the right: ``input_ids``, ``labels`` (-100 on padding) and, when present,
    ``longce_weights`` (1 on padding, where nothing is scored)."""

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        length = max(len(item["input_ids"]) for item in items)
        ids = torch.full((len(items), length), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(items), length), IGNORE_INDEX, dtype=torch.long)
        for row, item in enumerate(items):
            n = len(item["input_ids"])
            ids[row, :n] = torch.tensor(item["input_ids"])
            labels[row, :n] = ids[row, :n]
        batch = {"input_ids": ids, "labels": labels}
        if "longce_weights" in items[0]:
            w = torch.ones((len(items), length - 1), dtype=torch.float32)
            for row, item in enumerate(items):
                w[row, : len(item["longce_weights"])] = torch.tensor(item["longce_weights"])
            batch["longce_weights"] = w
        return batch
