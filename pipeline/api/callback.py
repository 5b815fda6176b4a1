"""LongPPL during training: a Hugging Face ``TrainerCallback`` that scores the model on a key-token
artifact at each evaluation.

    from pipeline.api.callback import LongPPLCallback

    callback = LongPPLCallback("artifacts/keytokens/<name>", documents=4)
    trainer = Trainer(model, args, ..., callbacks=[callback])

After each evaluation the model's PPL, LongPPL and LongPPL-soft on the artifact (``pipeline.api.score``)
are added to the metrics that ``evaluate()`` returns (``eval_longppl``, ...), so that
``metric_for_best_model="longppl"`` can pick checkpoints by LongPPL, and to ``state.log_history``.
Only the main process scores (the others would compute the same numbers).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from transformers import TrainerCallback

from pipeline.api import KeyTokens, score
from pipeline.artifact.reader import open_artifact
from pipeline.errors import PipelineError
from pipeline.metric_registry import perplexities

logger = logging.getLogger(__name__)


class LongPPLCallback(TrainerCallback):
    """Adds each perplexity of the metric registry (``<prefix>ppl``, ``<prefix>longppl``,
    ``<prefix>longppl_soft``) to each evaluation."""

    def __init__(
        self,
        keytokens: KeyTokens,
        tokenizer: Any = None,
        *,
        documents: int | Sequence[str] | None = None,
        prefix: str = "eval_",
        **score_options: Any,
    ):
        self.artifact = open_artifact(keytokens)  # loaded and verified once
        self.tokenizer = tokenizer
        self.documents = documents
        self.prefix = prefix
        self.score_options = score_options
        self.history: list[dict[str, Any]] = []  # one entry per evaluation: step and values

    def on_evaluate(self, args, state, control, model=None, metrics=None, processing_class=None, **kwargs):
        if not state.is_world_process_zero:
            return
        tokenizer = self.tokenizer or processing_class
        if model is None or tokenizer is None:
            raise PipelineError("LongPPLCallback needs the model and its tokenizer: pass tokenizer=...")
        result = score(model, tokenizer, self.artifact, documents=self.documents, **self.score_options)
        values = {f"{self.prefix}{m}": v for m in perplexities() if (v := result.corpus[m]) is not None}
        if metrics is not None:
            metrics.update(values)
        state.log_history.append({**values, "step": state.global_step})
        self.history.append({"step": state.global_step, **values})
        logger.info("LongPPL on %s at step %d: %s", result.artifact, state.global_step, values)
