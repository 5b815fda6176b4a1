"""The fine-tuning job (`make finetune`), run by the recipe as every job is: its settings typed
(``FinetuneJob``), the corpus (with an artifact's weights for ``source=artifact``) opened before the
model loads (on the CPU: ``OnTheCPU``), the corpus as training sequences, the LongCE settings for the
model, then ``pipeline.training.trainer.finetune``; the run's record is written beside its checkpoints."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic.dataclasses
from pydantic import Field

from pipeline import __version__
from pipeline.artifact.reader import open_artifact
from pipeline.definition import KeyTokenDefinition, Positive
from pipeline.errors import PipelineError
from pipeline.hub import is_hub_dataset
from pipeline.jobs.recipe import JobResult
from pipeline.models.loading import LoadedModel, ModelChoice, dtype_name
from pipeline.outputs import Output
from pipeline.provenance import library_versions
from pipeline.reporting.finetune import finish_line, start_line
from pipeline.settings import Compute, DirectoryName, directory_name, parse, parse_group
from pipeline.text.corpus import CorpusSpec, Document, load_corpus
from pipeline.training.longce import SOURCES, ArtifactWeights, LongCESettings
from pipeline.training.sequences import TrainingSequence, build_sequences
from pipeline.training.trainer import RUN_FOLDER, finetune, training_arguments


@pydantic.dataclasses.dataclass(frozen=True)
class Finetune:
    """The command's own settings (the loss's definition and compute are their own types)."""

    source: Literal[SOURCES] = "self"
    artifact: str | None = None  # the artifact for source=artifact
    max_length: Positive | None = None  # None: the model's context length
    min_tokens: Annotated[int, Field(ge=0)] = 2
    num_documents: Positive | None = None
    add_bos: bool = True
    seed: Annotated[int, Field(ge=0)] = 42
    resume: bool | str | None = None
    name: DirectoryName | None = None  # the run directory's name; None: derived
    output_dir: str = "artifacts/finetune"


@dataclass(frozen=True)
class OnTheCPU:
    """The model to fine-tune, as the recipe loads it: on the CPU, in the compute settings' dtype; the
    Trainer puts it on its device (each process its own GPU)."""

    choice: ModelChoice

    @property
    def needs_hub(self) -> bool:
        return self.choice.needs_hub

    @property
    def display_name(self) -> str:
        return self.choice.display_name

    def check(self) -> None:
        self.choice.check()

    def load(self, compute: Compute) -> LoadedModel:
        return self.choice.load(dataclasses.replace(compute, device="cpu"))


@dataclass(frozen=True)
class FinetuneJob:
    """`make finetune`'s settings, typed: the model, the run's own settings, the loss's definition, the
    compute settings, the corpus, the ``TrainingArguments`` fields (``training``: Hugging Face's own,
    checked by ``TrainingArguments``) and the whole configuration as given (recorded with the run). Run
    by the recipe; its run folder and resume are the Trainer's (``resume=``)."""

    choice: ModelChoice
    options: Finetune
    definition: KeyTokenDefinition
    compute: Compute
    corpus: CorpusSpec
    training: Mapping[str, Any]
    config: Mapping[str, Any]
    results = None  # the run's record is written beside its checkpoints
    results_setting = "output_dir"
    results_kind = None

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> FinetuneJob:
        """``conf/finetune.yaml`` as plain data, typed and checked."""
        return cls(
            choice=parse_group(ModelChoice, values, "model"),
            options=parse(Finetune, values),
            definition=parse(KeyTokenDefinition, values),
            compute=parse(Compute, values),
            corpus=parse_group(CorpusSpec, values, "corpus"),
            training=dict(values["training"]),
            config=dict(values),
        )

    @property
    def model(self) -> OnTheCPU:
        return OnTheCPU(self.choice)

    @property
    def run_dir(self) -> Path:
        """The run's folder: its checkpoints and record (``output_dir``/``run_name``)."""
        return Path(self.options.output_dir).absolute() / run_name(
            self.options, self.definition, self.corpus, self.choice
        )

    def outputs(self) -> list[Output]:
        return [Output("output_dir", self.run_dir, RUN_FOLDER)]

    def needs_hub(self) -> bool:
        return self.corpus.needs_network or is_hub_dataset(self.options.artifact or "")

    def open(self) -> tuple[list[Document], ArtifactWeights | None, dict[str, Any] | None]:
        """The training documents, and an artifact's weights for ``source=artifact``, before the model
        loads; a ``max_length`` that would make LongCE plain CE is refused first."""
        if self.options.max_length:
            check_weighted(self.options, self.definition, self.options.max_length)
        docs = load_corpus(self.corpus)[: self.options.num_documents]
        weights, artifact = (
            artifact_weights(self.options) if self.options.source == "artifact" else (None, None)
        )
        return docs, weights, artifact

    @staticmethod
    def append(path: Path, row: dict[str, Any]) -> None:
        raise NotImplementedError("the finetune job writes no results lines")

    def measure(self, lm: LoadedModel, scorer: Any, inputs: tuple, record: Any, started: float) -> JobResult:
        """One fine-tuning run: the training sequences, the loss, the Trainer; its value is the run's
        record."""
        return JobResult(train(self, lm, *inputs))


def train(
    job: FinetuneJob, lm: LoadedModel, docs: list[Document], weights: ArtifactWeights | None, artifact: Any
) -> dict[str, Any]:
    """The sequences of ``docs`` for ``lm``, the LongCE settings for it, the Trainer's run; the run's
    record."""
    choice, options, definition, compute, corpus = (
        job.choice,
        job.options,
        job.definition,
        job.compute,
        job.corpus,
    )
    training, config = dict(job.training), dict(job.config)
    settings = LongCESettings.for_model(options.source, definition, compute, lm.tokenizer)
    sequences, data = training_data(options, corpus, lm, docs, weights)
    check_weighted(options, definition, data["max_length"])
    run_dir = job.run_dir
    if isinstance(training.get("deepspeed"), str):
        training["deepspeed"] = str(Path(training["deepspeed"]).absolute())
    args = training_arguments(run_dir, training, compute.device, options.seed)
    record = {
        "name": run_dir.name,
        "loss": dataclasses.asdict(settings),
        "model": lm.source.to_dict(),
        "dtype": dtype_name(lm.dtype),
        "corpus": data,
        "artifact": artifact,
        "training": training,
        "config": config,
        "pipeline_version": __version__,
        "libraries": library_versions(),
    }
    print(start_line(choice.spec, settings.source, data, run_dir))
    record = finetune(lm, sequences, settings, args, record, resume=options.resume)
    print(finish_line(record, run_dir))
    return record


def check_weighted(options: Finetune, definition: KeyTokenDefinition, max_length: int) -> None:
    """LongCE(self) weights only tokens past K + d (the first sliding window is the full context): with
    sequences no longer than that, every weight is 1 and the run would be plain CE under a LongCE name."""
    K, d = definition.K, definition.d
    if options.source == "self" and max_length <= K + d:
        raise PipelineError(
            f"source=self with K={K}, d={d} and max_length={max_length}: no token of a sequence of at most "
            f"{max_length} tokens lies past K + d = {K + d}, so every weight would be 1 and LongCE would be "
            f"plain CE: lower K or d (K + d < {max_length}), raise max_length, or pass source=ce"
        )


def run_name(
    options: Finetune, definition: KeyTokenDefinition, corpus: CorpusSpec, choice: ModelChoice
) -> str:
    """``name``, or ``<corpus>--<model>--<loss>``."""
    if options.name:
        return options.name
    loss = "ce" if options.source == "ce" else f"longce-{options.source}"
    if options.source == "self":
        loss += f"-K{definition.K}-d{definition.d}-g{definition.gamma:g}"
    return directory_name(f"{corpus.name}--{Path(choice.display_name).name}--{loss}")


def training_data(
    options: Finetune,
    corpus: CorpusSpec,
    lm: LoadedModel,
    docs: list[Document],
    weights: ArtifactWeights | None,
) -> tuple[list[TrainingSequence], dict[str, Any]]:
    """The training sequences of ``docs`` (with an artifact's ``weights``), and what the run record
    says of them."""
    max_length = options.max_length or lm.context_length
    if max_length is None:
        raise PipelineError(f"{lm.source.spec} does not state its context length: set max_length=<tokens>")
    if lm.context_length is not None and max_length > lm.context_length:
        raise PipelineError(
            f"max_length={max_length} exceeds {lm.source.spec}'s context of {lm.context_length} tokens: set "
            f"max_length<={lm.context_length}, or extend the model's context first (rope_scaling in its "
            "config.json, as the paper's PI and EABF do) and pass that checkpoint"
        )
    sequences, skipped = build_sequences(
        docs, lm.tokenizer, max_length=max_length, add_bos=options.add_bos,
        min_tokens=options.min_tokens, weights=weights,
    )  # fmt: skip
    data = {
        "spec": dataclasses.asdict(corpus),
        "documents": [{"doc_id": d.id, "sha256": d.sha256} for d in docs],
        "skipped": skipped,
        "sequences": len(sequences),
        "truncated": sum(s.truncated for s in sequences),
        "max_length": max_length,
        "tokens": sum(len(s.input_ids) for s in sequences),
    }
    return sequences, data


def artifact_weights(options: Finetune) -> tuple[ArtifactWeights, dict[str, Any]]:
    if not options.artifact:
        raise PipelineError("source=artifact needs artifact=<artifact dir or hf://datasets/...>")
    artifact = open_artifact(options.artifact)
    record = {
        "name": artifact.root.name,
        "fingerprint": artifact.manifest["fingerprint"],
        "contents": artifact.contents,
    }
    record |= {"source": artifact.origin, **{k: artifact.settings.get(k) for k in ("K", "d", "gamma")}}
    record["evaluator"] = artifact.settings["evaluator"]["spec"]
    return ArtifactWeights(artifact), record
