"""Does a tokenizer belong to a model? Cheap checks that the model's own tokenizer always passes.

A model scored with another model's tokenizer still gives numbers (PPL in the millions, or a LongPPL
over a handful of key tokens), so the pairing is checked where a model and its tokenizer meet:

- ``check_pairing``: the tokenizer's BOS id must be among those the model's config and generation
  config name, and its EOS id where there is no BOS to compare (only where both sides name one; a
  fine-tune may give a new EOS, and pad ids, which users set freely, change no number);
- ``check_held``: what an API call is given is a loaded model (parameters, none on the meta device,
  all of one dtype) and a tokenizer object (not its name, nor a function);
- ``check_token_ids``: every token id fed to the model must have an embedding;
- ``worse_than_uniform``: a perplexity above the vocabulary size, worse than guessing uniformly, is
  reported (a trained model with its own tokenizer is far below it; an untrained one lies near it).
"""

from __future__ import annotations

from os import PathLike
from typing import Any

import torch

from pipeline.errors import PipelineError

# What the pipeline calls on a tokenizer (besides calling it): a function or another object lacks them.
TOKENIZER_METHODS = ("encode", "decode")
ADVICE = "pass the model's own tokenizer (AutoTokenizer.from_pretrained of the model's checkpoint)"


def check_held(model: Any, tokenizer: Any) -> None:
    """A model and tokenizer passed in memory: the model a loaded torch module (its parameters, none
    on the meta device: weights never loaded), the tokenizer an object, not a name or a path."""
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise PipelineError(
            f"model is {type(model).__name__}: pass a causal LM loaded in memory (a transformers model), "
            "or load one with pipeline.api.load_model(<name or path>)"
        )
    meta = next((name for name, p in model.named_parameters() if p.is_meta), None)
    if meta is not None or next(model.parameters(), None) is None:
        why = f"its parameter {meta} is on the meta device" if meta else "it has no parameters"
        raise PipelineError(
            f"model {type(model).__name__}: {why}, so its weights are not loaded: load them first"
        )
    if tokenizer is None:
        raise PipelineError("pass the model's tokenizer too: the key spans are mapped onto its tokens")
    lacking = next((name for name in TOKENIZER_METHODS if not callable(getattr(tokenizer, name, None))), None)
    if isinstance(tokenizer, (str, bytes, PathLike)) or not callable(tokenizer) or lacking:
        what = f"; it has no {lacking}()" if lacking and callable(tokenizer) else ""
        raise PipelineError(
            f"tokenizer is {type(tokenizer).__name__} ({str(tokenizer)[:80]!r}{what}): pass the tokenizer "
            "object, e.g. AutoTokenizer.from_pretrained(<its name or folder>)"
        )
    if mixed := mixed_dtype(model):
        raise PipelineError(
            f"model {type(model).__name__} is {mixed}: its forward would mix the two and fail; pass the "
            "model in one dtype, e.g. model.to(torch.float16) or model.float()"
        )


def mixed_dtype(model: Any) -> str | None:
    """Where a model's floating parameters are not all of one dtype (``"float16 but its parameter
    <name> is float32"``), outside the modules it keeps in float32 by design (transformers'
    ``_keep_in_fp32_modules``: MoE routers and the like); None when they are."""
    kept = [*(getattr(model, "_keep_in_fp32_modules", None) or ()),
            *(getattr(model, "_keep_in_fp32_modules_strict", None) or ())]  # fmt: skip
    dtype = None
    for name, parameter in model.named_parameters():
        if not parameter.is_floating_point():
            continue
        if parameter.dtype == torch.float32 and any(module in name for module in kept):
            continue
        if dtype is None:
            dtype = parameter.dtype
        elif parameter.dtype != dtype:
            return f"{str(dtype).removeprefix('torch.')} but its parameter {name} is " + str(
                parameter.dtype
            ).removeprefix("torch.")
    return None


def token_ids(value: Any) -> set[int]:
    """A config's token id entry (None, an id or a list of ids) as a set."""
    if value is None:
        return set()
    if isinstance(value, (list, tuple)):
        return {int(v) for v in value if v is not None}
    return {int(value)}


def model_ids(model: Any, name: str) -> set[int]:
    """The ids the model's config and generation config give for ``name`` (``bos_token_id``, ...)."""
    sources = (getattr(model, "config", None), getattr(model, "generation_config", None))
    return set().union(*(token_ids(getattr(s, name, None)) for s in sources if s is not None))


def check_pairing(model: Any, tokenizer: Any, spec: str) -> None:
    """A PipelineError when the tokenizer's BOS id is not one the model's configs name, or, where
    there is no BOS to compare, its EOS id. (A BOS that agrees with an EOS that does not is a chat
    fine-tune's new end token, not another model's tokenizer.)"""
    found = {}
    for token in ("bos", "eos"):
        mine, theirs = getattr(tokenizer, f"{token}_token_id", None), model_ids(model, f"{token}_token_id")
        if mine is not None and theirs:
            found[token] = (int(mine), theirs)
    wrong = [t for t, (mine, theirs) in found.items() if mine not in theirs]
    if "bos" in wrong or (wrong and "bos" not in found):
        said = "; ".join(
            f"its {t.upper()} is token {found[t][0]}, the model's config says "
            + " or ".join(str(i) for i in sorted(found[t][1]))
            for t in wrong
        )
        raise PipelineError(f"the tokenizer is not the one of '{spec}' ({said}): {ADVICE}")


def embedding_rows(model: Any) -> int | None:
    """How many token ids the model's input embeddings hold (None when it does not say)."""
    embeddings = model.get_input_embeddings()
    rows = getattr(embeddings, "num_embeddings", None)
    if rows is None and getattr(embeddings, "weight", None) is not None:
        rows = embeddings.weight.shape[0]
    return None if rows is None else int(rows)


def check_token_ids(input_ids: torch.Tensor, rows: int | None) -> None:
    """A PipelineError when a token id has no embedding (a tokenizer larger than the model's)."""
    if rows is None or input_ids.numel() == 0:
        return
    largest = int(input_ids.max())
    if largest >= rows:
        raise PipelineError(
            f"token id {largest} is beyond the model's vocabulary of {rows} embeddings: the tokenizer "
            f"is not the model's; {ADVICE}"
        )


def worse_than_uniform(ppl: float | None, vocab_size: int, spec: str) -> str | None:
    """The warning for a perplexity above the vocabulary size, or None."""
    if ppl is None or ppl <= vocab_size:
        return None
    return (
        f"PPL {ppl:.4g} of '{spec}' is above its vocabulary size ({vocab_size}), worse than guessing "
        "uniformly: is the tokenizer the model's own? (an untrained model lies near the vocabulary size)"
    )
