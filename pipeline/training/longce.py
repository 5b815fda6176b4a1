"""LongCE (paper §3.2, Eq. 6-7): cross-entropy with every token weighted by its gain from long context.

    LongCE(x) = (1/n) Σ_i w_i · (-log P(x_i | x_<i)),   w_i = min(exp(LSD_i), gamma)

The weights are constants (stop-gradient): only the long-context log-probs carry a gradient. They
come from one of three sources, through one code path, so that the losses compare like for like:

- ``self`` (the paper): LSD from the model being trained, recomputed at every step. The long
  log-probs are those of the pass with gradient (the model's own forward, detached); the short ones
  come from no-grad sliding windows (``pipeline.models.logprobs.sliding_window_logprobs``: windows
  ``seq[s : s+K+d]`` for s = d, 2d, ... score their last d tokens, the last window partial; the
  output head runs in bounded chunks, never on a window's full-vocabulary logits at once).
- ``artifact``: the soft weights of a stage-1 artifact, carried onto the training tokenizer's tokens
  with stage 2's alignment (``ArtifactWeights``; no cost at training time); given with the batch.
- ``ce``: every weight 1, plain cross-entropy.

Tokens without a short context (before position K) get weight 1 (min(1, gamma): LSD counts as 0,
as in the reference); so do tokens K..K+d-1, whose short window is the full context (LSD = 0).
The reference implementation (PKU-ML/LongPPL ``finetune/finetune.py::loss_weight``) runs that
first window as one more forward pass, which gives exp(0) up to float rounding: the same weights,
one pass fewer here.

Mode: the short passes run in whatever mode the model is in, as in the reference. During training
(train mode) they see the same dropout regime as the long pass they are compared with; with dropout
the weights are then random (most LLMs have none). Call ``model.eval()`` for deterministic weights.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pydantic.dataclasses
import torch

from pipeline import definition
from pipeline.artifact.reader import ArtifactDocument, iter_documents
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.definition import KeyTokenDefinition
from pipeline.errors import PipelineError
from pipeline.models.logprobs import TargetScorer, scorer_for, sliding_window_logprobs
from pipeline.provenance import text_sha256
from pipeline.settings import Compute
from pipeline.text import alignment

SOURCES = ("self", "artifact", "ce")
IGNORE_INDEX = -100


@pydantic.dataclasses.dataclass(frozen=True)
class LongCESettings:
    """The loss: its weight source, the key-token definition the weights follow (K, d and gamma;
    alpha and beta do not enter the loss) and how the short passes run."""

    source: Literal[SOURCES] = "self"
    definition: KeyTokenDefinition = KeyTokenDefinition()
    compute: Compute = Compute()
    window_bos_id: int | None = None  # prefix every short window with this token (None: the reference)

    @classmethod
    def for_model(
        cls, source: str, definition: KeyTokenDefinition, compute: Compute, tokenizer: Any
    ) -> LongCESettings:
        """The settings for a model with ``tokenizer``: its BOS before every short window when the
        definition's ``short_window_bos`` says so."""
        bos = tokenizer.bos_token_id if definition.short_window_bos else None
        return cls(source, definition, compute, None if bos is None else int(bos))


@dataclass
class LongCEOutput:
    """The loss of one batch. Per-token tensors are (batch, length - 1), for targets input_ids[:, 1:]."""

    loss: torch.Tensor  # Eq. 6: weighted_sum / n_tokens, with gradient
    weighted_sum: torch.Tensor  # Σ w · NLL over the scored targets, with gradient
    n_tokens: int  # scored targets (labels != -100)
    weights: torch.Tensor  # float32, detached; 1 where a target is not scored
    nll: torch.Tensor  # float32, detached; 0 where a target is not scored
    mask: torch.Tensor  # bool: scored targets

    def stats(self, gamma: float) -> dict[str, float]:
        """Sums for logging: NLL, weights, weights at the cap, weights above 1, tokens."""
        w = self.weights[self.mask].double()
        return {
            "nll_sum": float(self.nll[self.mask].double().sum()),
            "weight_sum": float(w.sum()),
            "weight_max": float(w.max()) if len(w) else 1.0,
            "n_clamped": float((w >= gamma).sum()),
            "n_upweighted": float((w > 1).sum()),
            "n_tokens": float(self.n_tokens),
        }


def token_nll(model: Any, input_ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-token NLL of ``targets`` (batch x length - 1; -100 ignored: 0) from one forward pass of the
    model with gradient, in float32 (float64 for a float64 model), as transformers' own loss does."""
    logits = model(input_ids=input_ids, use_cache=False).logits[:, :-1]
    if logits.dtype != torch.float64:
        logits = logits.float()
    nll = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="none"
    )
    return nll.view(targets.shape)


def unwrap(model: Any) -> Any:
    """The model inside DDP / DeepSpeed / compile wrappers (their ``module`` or ``_orig_mod``)."""
    while True:
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if inner is None or inner is model:
            return model
        model = inner


class LongCE:
    """The LongCE loss, usable from any training loop::

    loss_fn = LongCE(LongCESettings(source="self", definition=KeyTokenDefinition(K=4096, d=1024)))
    out = loss_fn(model, input_ids)          # labels=..., weights=... (artifact source)
    out.loss.backward()                      # out.weights: the stop-gradient weights
    """

    def __init__(self, settings: LongCESettings):
        self.settings = settings
        self._scorer: TargetScorer | None = None
        self._told_no_short_context = False

    def __call__(
        self,
        model: Any,
        input_ids: torch.Tensor,
        *,
        labels: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
        scoring_model: Any = None,
    ) -> LongCEOutput:
        """``model``: the (possibly wrapped) model for the pass with gradient; ``scoring_model``: the
        plain model for the no-grad short passes (default: ``model`` unwrapped). ``labels``: targets
        as in transformers (input_ids with -100 where not scored; right padding only). ``weights``:
        (batch x length - 1) per-target weights, for the ``artifact`` source."""
        targets = (input_ids if labels is None else labels)[:, 1:]
        mask = targets != IGNORE_INDEX
        nll = token_nll(model, input_ids, targets)
        w = self._weights(model, input_ids, nll.detach(), mask, weights, scoring_model)
        w = w.to(nll.device, nll.dtype)
        weighted_sum = (w * nll).sum()
        n = int(mask.sum())
        return LongCEOutput(
            loss=weighted_sum / max(n, 1),
            weighted_sum=weighted_sum,
            n_tokens=n,
            weights=w.detach().float(),
            nll=nll.detach().float(),
            mask=mask,
        )

    def _weights(self, model, input_ids, nll, mask, given, scoring_model) -> torch.Tensor:
        source = self.settings.source
        if source == "ce":
            return torch.ones_like(nll)
        if source == "artifact":
            if given is None or given.shape != nll.shape:
                shape = None if given is None else tuple(given.shape)
                raise PipelineError(
                    f"LongCE(artifact) needs per-target weights of shape {tuple(nll.shape)} with the batch "
                    f"(got {shape}): build the training data with pipeline.training.longce.ArtifactWeights"
                )
            return torch.where(mask, given.to(nll.device, nll.dtype), torch.ones_like(nll))
        return self.self_weights(
            scoring_model if scoring_model is not None else unwrap(model), input_ids, nll, mask
        )

    @torch.no_grad()
    def self_weights(
        self, model: Any, input_ids: torch.Tensor, nll: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """min(exp(short NLL - long NLL), gamma) per target, from the long pass's NLL (detached) and
        the sliding-window short passes of ``model``; 1 where there is no shorter context."""
        s = self.settings.definition
        scorer = self._scorer_for(model)
        none = min(1.0, s.gamma)  # no shorter context: LSD counts as 0 (the reference clamps it too)
        out = torch.full(nll.shape, none, dtype=torch.float64)
        for b in range(input_ids.shape[0]):
            scored = torch.nonzero(mask[b]).flatten()
            length = int(scored[-1]) + 2 if len(scored) else 0  # tokens up to the last scored target
            if length <= s.K + s.d:
                self._say_no_short_context(length)
                continue
            long = np.full(length, np.nan)
            long[1:] = -nll[b, : length - 1].double().cpu().numpy()
            seq = input_ids[b, :length].detach().cpu()
            short = sliding_window_logprobs(scorer, seq, s.K, s.d, long, bos_id=self.settings.window_bos_id)
            w = definition.soft_weight(definition.long_short_difference(long, short), s.gamma)
            out[b, : length - 1] = torch.from_numpy(np.where(np.isnan(w[1:]), none, w[1:]))
        return torch.where(mask.cpu(), out, torch.ones_like(out))

    def _scorer_for(self, model: Any) -> TargetScorer:
        if self._scorer is None or self._scorer.model is not model:
            head = model.get_output_embeddings()
            compute = self.settings.compute
            # DeepSpeed ZeRO-3 partitions weights: only a call of the head module gathers them.
            if hasattr(getattr(head, "weight", None), "ds_id"):
                compute = dataclasses.replace(compute, vocab_tile=None)
            scorer = scorer_for(model, compute)
            was_training = model.training
            model.eval()  # the guard compares two computations: no dropout between them
            try:
                scorer.check_against_full_forward()
            finally:
                model.train(was_training)
            self._scorer = scorer
        return self._scorer

    def _say_no_short_context(self, length: int) -> None:
        if self._told_no_short_context:
            return
        self._told_no_short_context = True
        s = self.settings.definition
        warnings.warn(
            f"LongCE(self): a sequence of {length} tokens is not longer than K + d = {s.K + s.d} "
            f"(K={s.K}, d={s.d}), so no token has a context shorter than its full one: all its weights "
            "are 1 and LongCE equals CE on it (said once)",
            stacklevel=6,  # the caller of LongCE (through self_weights' no_grad wrapper)
        )


# ----------------------------------------------------------------------------------------------
# Weights from a stage-1 artifact


class ArtifactWeights:
    """An artifact's soft weights (min(exp(LSD), gamma) of the evaluator's tokens), carried onto any
    tokenizer's tokens of the same text as stage 2 does for LongPPL-soft: the mean over a token's
    characters of the weight of the evaluator token covering each (``alignment.soft_weights``).

    Training documents are matched to artifact documents by id; the texts must agree: the artifact
    holds exactly the text it scored, which is either the training text or, for a document the
    artifact truncated, a prefix of it (checked against the recorded sha256 of the full text).
    """

    def __init__(self, artifact: KeyTokenArtifact):
        self.artifact = artifact
        self.documents = {doc.doc_id: doc for doc in iter_documents(artifact)}
        docs = artifact.documents
        self.source_sha256 = dict(
            zip(docs["doc_id"].to_pylist(), docs["source_sha256"].to_pylist(), strict=True)
        )
        self.skipped = {s["doc_id"]: s["reason"] for s in artifact.manifest.get("skipped", [])}
        self.gamma = float(artifact.settings["gamma"])

    def token_weights(self, doc_id: str, text: str, offsets: np.ndarray) -> np.ndarray:
        """Soft weight of each token ([start, end) character offsets into ``text``); NaN for tokens
        with no evaluator weight (no short context, or beyond the artifact's truncated text)."""
        doc = self.matching_document(doc_id, text)
        return alignment.soft_weights(offsets, doc.eval_offsets, doc.soft_weight, len(text))

    def matching_document(self, doc_id: str, text: str) -> ArtifactDocument:
        """The artifact's document ``doc_id``, checked to hold ``text`` (or a truncated prefix of it)."""
        root = self.artifact.root
        doc = self.documents.get(doc_id)
        if doc is None:
            why = f" (skipped there: {self.skipped[doc_id]})" if doc_id in self.skipped else ""
            raise PipelineError(
                f"training document '{doc_id}' is not in the key-token artifact {root}{why}: build the "
                'artifact from the training corpus (`make keytokens ARGS="corpus=..."`)'
            )
        if doc.text == text:
            return doc
        if text.startswith(doc.text) and text_sha256(text) == self.source_sha256[doc_id]:
            return doc  # the artifact scored a truncated prefix: the rest has no weight
        at = next((i for i, (a, b) in enumerate(zip(doc.text, text, strict=False)) if a != b), None)
        where = f"first difference at character {at}" if at is not None else "one text is longer"
        raise PipelineError(
            f"training document '{doc_id}' does not match the text of the key-token artifact {root} "
            f"({where}): the artifact was built from another corpus or version of it"
        )
