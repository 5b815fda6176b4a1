"""The forgetting-curve job (`make forgetting-curve`): one model's curve, its settings resolved against the
model, the text, the measurement (``pipeline.forgetting.curve``), the picture and the results line
(``forgetting.jsonl``, ``pipeline.results.forgetting``)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import pydantic.dataclasses
from pydantic import Field

from pipeline.definition import Positive
from pipeline.errors import PipelineError, settings_type
from pipeline.files import recorded_path
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
from pipeline.jobs.recipe import JobResult, ModelInput, Record, TypedJob
from pipeline.marks import folder_for
from pipeline.models.loading import LoadedModel, ModelChoice, dtype_name
from pipeline.models.logprobs import TargetScorer
from pipeline.outputs import Output
from pipeline.provenance import json_sha256
from pipeline.reporting.forgetting import plot_name, write_plot
from pipeline.results import forgetting as curve_lines
from pipeline.settings import Compute, flag, parse, parse_group
from pipeline.text.corpus import CorpusSpec, Document, load_corpus

PRESETS = ("cpu", "paper")  # conf/forgetting/preset/
TokenId = Annotated[int, Field(ge=0)]


@settings_type
@pydantic.dataclasses.dataclass(frozen=True)
class CurveOptions:
    """The command's settings (``conf/forgetting/``), checked before anything loads."""

    preset: Literal[PRESETS]
    grid: Literal[GRIDS]
    n: Positive  # test lengths
    R: Positive  # samples per length
    max_length: Positive | Literal["fit", "context"]
    max_input: Positive | None = None
    min_length: Positive = 8
    source: Literal[SOURCES] = "corpus"
    seed: Annotated[int, Field(ge=0)] = 0
    context: Positive | None = None  # the claimed context; None: the model's config
    beyond_context: bool = False
    bos_id: TokenId | None = None
    eos_id: TokenId | None = None


@dataclass(frozen=True)
class CurveJob(TypedJob):
    """`make forgetting-curve`'s settings, typed: the model, the curve's options, the corpus (none for
    random tokens), and where the line and the picture go."""

    model: ModelInput
    options: CurveOptions
    compute: Compute
    corpus: CorpusSpec | None
    results: Path
    plot_dir: Path
    progress: bool = False
    results_setting = "results"

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> CurveJob:
        """``conf/forgetting/forgetting.yaml`` as plain data, typed and checked."""
        options = parse(CurveOptions, values)
        return cls(
            model=parse_group(ModelChoice, values, "model"),
            options=options,
            compute=parse(Compute, values),
            corpus=parse_group(CorpusSpec, values, "corpus") if options.source == "corpus" else None,
            results=Path(str(values["results"])),
            plot_dir=Path(str(values["plot_dir"])),
            progress=flag(values["progress"], "progress"),
        )

    def outputs(self) -> list[Output]:
        return [Output("plot_dir", self.plot_dir, folder_for("folders of pictures", "forgetting-curve"))]

    def needs_hub(self) -> bool:
        return self.corpus is not None and self.corpus.needs_network

    def open(self) -> list[Document]:
        return load_corpus(self.corpus) if self.corpus is not None else []

    results_kind = curve_lines.KIND
    append = staticmethod(curve_lines.append)

    def measure(
        self, lm: LoadedModel, scorer: TargetScorer, docs: list[Document], record: Record, started: float
    ) -> JobResult:
        """The curve, its picture, its line; lengths that failed are an error once the line is written."""
        row = measure(lm, scorer, self.options, (self.corpus, docs), model_name=self.model.display_name,
                      progress=self.progress, started=started)  # fmt: skip
        plot = self.plot_dir.absolute() / plot_name(row)
        row["plot"] = recorded_path(plot)
        write_plot(row, plot)
        record(row)
        failed = [p for p in row["points"] if p["error"] is not None]
        error = None
        if failed:
            error = (
                f"{len(failed)} of {len(row['points'])} lengths failed (first: L={failed[0]['length']}, "
                f"{failed[0]['error']}); the line in {self.results} records them as failed"
            )
        return JobResult(row, error=error)


def measure(
    lm: LoadedModel,
    scorer: TargetScorer,
    options: CurveOptions,
    text: tuple[CorpusSpec | None, list[Document]],
    *,
    model_name: str,
    progress: bool = False,
    started: float | None = None,
) -> dict[str, Any]:
    """The curve of ``lm`` (scored by ``scorer``) on the corpus ``text`` (or random tokens): its
    results line, without the picture's path (``plot``) until the command writes it. ``started``:
    when the run began (its wall time is recorded), default now."""
    started = started or time.time()
    corpus, docs = text
    scorer.check_against_full_forward()
    settings, specials = curve_settings(options, lm, scorer)
    tokens = text_tokens(options, corpus, docs, lm, scorer, settings)
    points = measure_curve(scorer, settings, tokens, progress=progress)
    record = {**settings.to_dict(), "preset": options.preset, "max_length_setting": options.max_length}
    record.update(dtype=dtype_name(lm.dtype), device=str(lm.device))
    return curve_lines.result_row(
        model_name=model_name,
        model={**lm.source.to_dict(), **specials},
        settings=record,
        text=text_record(options, corpus, docs, tokens),
        points=points,
        memory=memory_lengths(points),
        seconds=time.time() - started,
        plot=None,
    )


def curve_settings(
    options: CurveOptions, lm: LoadedModel, scorer: TargetScorer
) -> tuple[CurveSettings, dict[str, Any]]:
    """The resolved settings and the special tokens' record; lengths beyond the claimed context
    are an error unless ``beyond_context``."""
    context = options.context or lm.context_length
    if not context:
        raise PipelineError(
            f"model '{lm.source.spec}' declares no context length (max_position_embeddings): "
            "pass context=<tokens> (its claimed context)"
        )
    check_token_settings(options, scorer.embedding_rows or scorer.vocab_size, lm.source.spec)
    specials = special_tokens(lm.tokenizer, options.bos_id, options.eos_id)
    has_eos = specials["eos_token_id"] is not None
    settings = CurveSettings(
        **{
            k: getattr(options, k)
            for k in ("source", "grid", "n", "R", "min_length", "seed", "beyond_context")
        },
        max_length=resolve_max_length(options.max_length, int(context), options.max_input, has_eos),
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
            f"claimed context of '{lm.source.spec}' ({context} tokens): the largest L that fits is "
            f"{resolve_max_length('fit', int(context), None, has_eos)} (max_length=fit); pass "
            "beyond_context=true to score longer inputs, marked as beyond it"
        )
    return settings, specials


def check_token_settings(options: CurveOptions, rows: int, spec: str) -> None:
    """``bos_id`` and ``eos_id``, when given, must be token ids the model has."""
    for name in ("bos_id", "eos_id"):
        value = getattr(options, name)
        if value is not None and value >= rows:
            raise PipelineError(
                f"setting {name}={value}: not a token id of '{spec}', whose vocabulary has {rows} ids: "
                f"give an id below {rows}, or null for the model's own"
            )


def text_tokens(
    options: CurveOptions,
    corpus: CorpusSpec | None,
    docs: list[Document],
    lm: LoadedModel,
    scorer: TargetScorer,
    settings: CurveSettings,
) -> np.ndarray:
    """The corpus tokens (checked to be long enough) or the ordinary token ids (random source)."""
    if options.source == "random":
        return ordinary_token_ids(lm.tokenizer, scorer.vocab_size)
    tokens = corpus_tokens(docs, lm.tokenizer)
    longest = max(grid_lengths(settings.grid, settings.n, settings.max_length, settings.min_length))
    where = f"corpus '{corpus.name}' (with {lm.source.spec}'s tokenizer)"
    check_corpus_length(len(tokens), longest, where)
    return tokens


def text_record(
    options: CurveOptions, corpus: CorpusSpec | None, docs: list[Document], tokens: np.ndarray
) -> dict[str, Any]:
    """Where the text came from and the hashes of the exact tokens."""
    record: dict[str, Any] = {"source": options.source, "n_tokens": len(tokens)}
    record["tokens_sha256"] = hashlib.sha256(tokens.astype("<i8").tobytes()).hexdigest()
    if options.source == "corpus":
        record.update({k: getattr(corpus, k) for k in ("name", "path", "dataset", "revision")})
        record["split"] = corpus.split if corpus.dataset else None  # a file has no split
        record.update(n_documents=len(docs), documents_sha256=json_sha256([d.sha256 for d in docs]))
    return record
