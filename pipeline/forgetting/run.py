"""The forgetting-curve command (`make forgetting-curve MODEL=...`): load the model and the text,
measure the curve, write the PNG and append the results line (``conf/forgetting/forgetting.yaml``)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.corpus import CorpusSpec, Document, load_corpus
from pipeline.errors import PipelineError
from pipeline.forgetting import results
from pipeline.forgetting.curve import CurveSettings, measure_curve, memory_lengths
from pipeline.forgetting.samples import (
    GRIDS,
    SOURCES,
    check_corpus_length,
    corpus_tokens,
    grid_lengths,
    input_tokens,
    ordinary_token_ids,
    resolve_max_length,
    special_tokens,
)
from pipeline.logprobs import TargetScorer
from pipeline.models import LoadedModel, ModelChoice, is_local_model
from pipeline.provenance import json_sha256
from pipeline.reporting.forgetting_plot import plot_name, summary_text, write_plot
from pipeline.score.run import model_name

PRESETS = ("cpu", "paper")  # conf/forgetting/preset/


def check_options(cfg: Any) -> None:
    """Settings that are wrong whatever the model: checked before anything loads."""
    if cfg.get("preset") not in PRESETS or any(cfg.get(k) is None for k in ("grid", "n", "R", "max_length")):
        raise PipelineError(
            f"preset={cfg.get('preset')!r} is not a forgetting-curve preset: use cpu or paper"
        )
    if cfg.source not in SOURCES:
        raise PipelineError(f"source={cfg.source!r}: use corpus (ordered text) or random (uniform token ids)")
    if cfg.grid not in GRIDS:
        raise PipelineError(f"grid={cfg.grid!r}: use linear or log")
    for key, low, what in (("n", 1, " test lengths"), ("R", 1, " samples per length"), ("seed", 0, "")):
        value = cfg[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise PipelineError(f"{key} must be an integer >= {low}{what} (got {key}={value})")


def curve_settings(cfg: Any, lm: LoadedModel, scorer: TargetScorer) -> tuple[CurveSettings, dict[str, Any]]:
    """The resolved settings and the special tokens' record; lengths beyond the claimed context
    are an error unless ``beyond_context``."""
    context = cfg.get("context") or lm.context_length
    if not context:
        raise PipelineError(
            f"model '{cfg.model.spec}' declares no context length (max_position_embeddings): "
            "pass context=<tokens> (its claimed context)"
        )
    specials = special_tokens(lm.tokenizer, cfg.get("bos_id"), cfg.get("eos_id"))
    has_eos = specials["eos_token_id"] is not None
    values = {k: cfg[k] for k in ("source", "grid", "n", "R", "min_length", "seed", "beyond_context")}
    settings = CurveSettings(
        **values,
        max_length=resolve_max_length(cfg.max_length, int(context), cfg.get("max_input"), has_eos),
        context=int(context),
        bos_token_id=int(specials["bos_token_id"]),
        eos_token_id=specials["eos_token_id"],
        head_chunk=scorer.head_chunk,
        vocab_tile=scorer.vocab_tile,
    )
    longest = max(grid_lengths(settings.grid, settings.n, settings.max_length, settings.min_length))
    if input_tokens(longest, has_eos) > context and not settings.beyond_context:
        raise PipelineError(
            f"length L={longest} makes inputs of {input_tokens(longest, has_eos)} tokens, beyond the "
            f"claimed context of '{cfg.model.spec}' ({context} tokens): the largest L that fits is "
            f"{resolve_max_length('fit', int(context), None, has_eos)} (max_length=fit); pass "
            "beyond_context=true to score longer inputs, marked as beyond it"
        )
    return settings, specials


def text_tokens(
    cfg: Any, docs: list[Document], lm: LoadedModel, scorer: TargetScorer, settings: CurveSettings
) -> np.ndarray:
    """The corpus tokens (checked to be long enough) or the ordinary token ids (random source)."""
    if settings.source == "random":
        return ordinary_token_ids(lm.tokenizer, scorer.vocab_size)
    tokens = corpus_tokens(docs, lm.tokenizer)
    longest = max(grid_lengths(settings.grid, settings.n, settings.max_length, settings.min_length))
    check_corpus_length(
        len(tokens), longest, f"corpus '{cfg.corpus.name}' (with {cfg.model.spec}'s tokenizer)"
    )
    return tokens


def text_record(cfg: Any, docs: list[Document], tokens: np.ndarray) -> dict[str, Any]:
    """Where the text came from and the hashes of the exact tokens."""
    record: dict[str, Any] = {"source": str(cfg.source), "n_tokens": len(tokens)}
    record["tokens_sha256"] = hashlib.sha256(tokens.astype("<i8").tobytes()).hexdigest()
    if cfg.source == "corpus":
        record.update({k: cfg.corpus.get(k) for k in ("name", "path", "dataset", "split", "revision")})
        record.update(n_documents=len(docs), documents_sha256=json_sha256([d.sha256 for d in docs]))
    return record


def run(cfg: Any) -> dict[str, Any]:
    """Measure one model's forgetting curve; write the PNG, append the results line, return it."""
    started = time.time()
    check_options(cfg)  # before anything loads: a wrong setting fails at once
    choice = ModelChoice.from_config(cfg.model)
    spec = CorpusSpec.from_config(cfg.corpus) if cfg.source == "corpus" else None
    if is_local_model(choice.spec) and (spec is None or not spec.needs_network):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing to download: fail fast
    docs = load_corpus(spec) if spec is not None else []
    lm = choice.load(dtype=cfg.dtype, device=cfg.device, cache_dir=cfg.get("cache_dir"))
    scorer = TargetScorer(lm.model, head_chunk=int(cfg.head_chunk), vocab_tile=cfg.get("vocab_tile"))
    scorer.check_against_full_forward()
    settings, specials = curve_settings(cfg, lm, scorer)
    tokens = text_tokens(cfg, docs, lm, scorer, settings)
    points = measure_curve(scorer, settings, tokens, progress=bool(cfg.progress))
    record = {**settings.to_dict(), "preset": str(cfg.preset), "max_length_setting": cfg.max_length}
    record.update(dtype=str(lm.dtype).removeprefix("torch."), device=str(lm.device))
    plot = Path(str(cfg.plot_dir)).absolute() / plot_name(model_name(choice), record)
    row = results.result_row(
        model_name=model_name(choice),
        model={**lm.source.to_dict(), **specials},
        settings=record,
        text=text_record(cfg, docs, tokens),
        points=points,
        memory=memory_lengths(points),
        seconds=time.time() - started,
        plot=str(plot),
    )
    write_plot(row, plot)
    path = Path(str(cfg.results))
    results.append(path, row)
    print(summary_text(row, path))
    failed = [p for p in points if p["error"] is not None]
    if failed:
        raise PipelineError(
            f"{len(failed)} of {len(points)} lengths failed (first: L={failed[0]['length']}, "
            f"{failed[0]['error']}); the line in {path} records them as failed"
        )
    return row
