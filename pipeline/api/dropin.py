"""A drop-in for the official package's ``compute_longppl``, computed by this project's engine.

    from pipeline.api.dropin import compute_longppl        # instead of: from longppl import compute_longppl

    out = compute_longppl(text, model, evaluator_model, tokenizer, evaluator_tokenizer)
    out["longppl"], out["n_key_token"], out["ppl"], out["n_token"]

Same signature, same return keys, same conventions, so the numbers agree (to float rounding): the
evaluator reads the text with its tokenizer's default special tokens, short windows of
``trunc_len + sliding_window`` tokens get no BOS, a key token has LSD > alpha and LCL > beta, and
the evaluated model reads the text without special tokens (its first token is not scored). With
``evaluator_model=None`` the key spans are read from ``save_path`` (parsed as numbers, never
``eval``); with an evaluator and a ``save_path`` they are written there in the official format.
What differs: full-vocabulary logits never exist (the output head runs in bounded blocks), and a
tokenizer that does not reproduce the text is an error instead of silently misplaced spans.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pydantic.dataclasses

from pipeline.artifact.reader import ArtifactDocument
from pipeline.definition import Finite, KeyTokenDefinition, Positive
from pipeline.errors import PipelineError
from pipeline.files import write_bytes_atomic
from pipeline.keytokens.selection import Prepared
from pipeline.keytokens.tables import keytoken_tables
from pipeline.models.loading import eval_mode, in_memory, load_model
from pipeline.models.logprobs import TargetScorer
from pipeline.models.pairing import check_pairing
from pipeline.official.span_files import KIND, format_spans, merge_overlaps, read_span_file
from pipeline.outputs import Output, check
from pipeline.score.documents import score_document
from pipeline.settings import ScoreSettings, parse
from pipeline.text.corpus import Document, check_unicode
from pipeline.text.tokenization import encode_with_offsets

OFFICIAL_SCORING = ScoreSettings(add_bos=False, grid=())  # no special tokens; key spans only


def compute_longppl(
    text: str,
    model: Any,
    evaluator_model: Any,
    tokenizer: Any = None,
    evaluator_tokenizer: Any = None,
    save_path: str | None = None,
    trunc_len: int = 4096,
    sliding_window: int = 1024,
    alpha: float = 2,
    beta: float = -2,
) -> dict[str, Any]:
    """LongPPL of ``text`` under ``model`` (a model with its ``tokenizer``, or a path / Hub id), with
    key tokens found by ``evaluator_model`` (likewise), or read from ``save_path`` when it is None.

    Returns ``longppl`` (None without key tokens), ``n_key_token`` (None without key tokens),
    ``ppl`` and ``n_token`` (the evaluated model's tokens of the text), as the official package."""
    if not isinstance(text, str):
        raise PipelineError(
            f"text is {type(text).__name__}, not str: pass the text itself (decode bytes first)"
        )
    check_unicode(text, "text")
    out = (
        None
        if evaluator_model is None or save_path is None
        else check(Output("save_path", Path(save_path), KIND))
    )
    rule = parse(DropInSettings, {"trunc_len": trunc_len, "sliding_window": sliding_window, "alpha": alpha,
                                  "beta": beta})  # fmt: skip
    model, tokenizer = loaded(model, tokenizer)
    if evaluator_model is not None:
        evaluator_model, evaluator_tokenizer = loaded(evaluator_model, evaluator_tokenizer)
        check_pairing(
            evaluator_model, evaluator_tokenizer, getattr(evaluator_model, "name_or_path", "evaluator")
        )
        spans = key_spans(text, evaluator_model, evaluator_tokenizer, *rule.values())
        if out is not None:
            write_bytes_atomic(out.path, format_spans(spans[:, 0], spans[:, 1]).encode(), out)
    elif save_path is None:
        raise PipelineError("compute_longppl needs an evaluator_model, or save_path with saved key spans")
    else:
        spans, _ = merge_overlaps(read_span_file(save_path))  # the official files may overlap
        check_spans_fit(spans, text, save_path)
    starts, ends = (pa.array(np.ascontiguousarray(spans[:, i])) for i in (0, 1))
    doc = ArtifactDocument("text", text, None, pa.table({"char_start": starts, "char_end": ends}))
    lm = in_memory(model, tokenizer)
    check_fits(lm, text)
    with eval_mode(model):
        result = score_document(lm, TargetScorer(model), doc, OFFICIAL_SCORING)
    n_key = int(result.key.n)
    return {
        "longppl": result.key.perplexity() if n_key else None,
        "n_key_token": n_key or None,
        "ppl": result.all.perplexity(),
        "n_token": result.n_tokens,
    }


@pydantic.dataclasses.dataclass(frozen=True)
class DropInSettings:
    """``compute_longppl``'s settings, checked as the commands check theirs (``True`` is no number)."""

    trunc_len: Positive
    sliding_window: Positive
    alpha: Finite
    beta: Finite

    def values(self) -> tuple[int, int, float, float]:
        return self.trunc_len, self.sliding_window, self.alpha, self.beta


def check_spans_fit(spans: np.ndarray, text: str, save_path: str) -> None:
    """Saved key spans must lie inside the text: spans past its end were saved for another text."""
    end = int(spans[:, 1].max()) if len(spans) else 0
    if end > len(text):
        raise PipelineError(
            f"the key spans in {save_path} reach character {end}, past the end of the text ({len(text)} "
            "characters): they were saved for another text"
        )


def check_fits(lm: Any, text: str) -> None:
    """The text must fit the model's context: ``compute_longppl`` scores it in one pass, as the
    official package does (``pipeline.api.score`` takes ``context_limit`` for a sliding window)."""
    context = lm.context_length
    n_tokens = len(encode_with_offsets(lm.tokenizer, text).ids)
    if context is not None and n_tokens > context:
        raise PipelineError(
            f"the text has {n_tokens} tokens for {lm.source.spec}, more than its context of {context}: "
            "compute_longppl scores a text in one pass, as the official package; score a shorter text, or "
            "use pipeline.api.score(..., context_limit=<tokens>) for a sliding window"
        )


def loaded(model: Any, tokenizer: Any) -> tuple[Any, Any]:
    """A model object with its tokenizer, or a path / Hub id loaded with the project's loader."""
    if isinstance(model, (str, Path)):
        if tokenizer is not None:
            raise PipelineError("pass a tokenizer only with a model object, not with a model path")
        lm = load_model(str(model))
        return lm.model, lm.tokenizer
    return model, tokenizer


def leading_bos(tokenizer: Any, text: str, ids: np.ndarray) -> int | None:
    """The BOS that the tokenizer's default special tokens put before the text (None: none)."""
    default = list(tokenizer(text)["input_ids"])
    if default == ids.tolist():
        return None
    if default == [tokenizer.bos_token_id, *ids.tolist()]:
        return tokenizer.bos_token_id
    raise PipelineError(
        "the evaluator tokenizer adds special tokens other than one leading BOS: not supported"
    )


def key_spans(text: str, model: Any, tokenizer: Any, K: int, d: int, alpha: float, beta: float) -> np.ndarray:
    """The merged key spans of the evaluator on ``text``, with the official conventions, (n, 2)."""
    enc = encode_with_offsets(tokenizer, text)
    bos = leading_bos(tokenizer, text, enc.ids)
    if len(enc.ids) + (bos is not None) <= K:  # no token has a short context: no key token
        return np.zeros((0, 2), dtype=np.int64)
    values = {"K": K, "d": d, "alpha": alpha, "beta": beta, "short_window_bos": False}
    rule = parse(KeyTokenDefinition, values)  # gamma: soft weights are not used by compute_longppl
    item = Prepared(0, Document("text", text), text, enc.ids, enc.offsets, enc.offsets_from, False)
    with eval_mode(model):
        _, _, spans = keytoken_tables(TargetScorer(model), item, rule, bos)
    return np.stack([spans["char_start"].to_numpy(), spans["char_end"].to_numpy()], axis=1).astype(np.int64)
