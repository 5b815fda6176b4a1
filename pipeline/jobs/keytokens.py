"""The keytokens job (`make keytokens`): an evaluator reads a corpus and writes the key-token artifact,
run by the recipe as every job is (``pipeline.jobs.recipe``: its folder locked, the offline rule, its
inputs opened before any model loads). Its settings are typed and checked once from the Hydra config
(``KeyTokensJob``: evaluator, corpus, definition, compute, documents, output, and where its tasks run).

The recipe loads no model for it (``model = None``): its ``open`` makes the plan (the documents, with
the evaluator's tokenizer only; ``pipeline.keytokens.plan``) and the executor of its tasks
(``pipeline.keytokens.executors``), and its ``measure`` runs them, each loading the evaluator in its own
process (``pipeline.keytokens.step``), and writes the artifact (``pipeline.keytokens.stage``); then the
artifact is loaded with every check, counted, and given its key-token pages. The command
(``pipeline.commands.keytokens``) prints the summary.
"""

from __future__ import annotations

import dataclasses
import resource
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass as dataclass_plain
from pathlib import Path
from typing import Any

import torch
from pydantic.dataclasses import dataclass

from pipeline.artifact.reader import load_artifact
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.artifact.statistics import statistics
from pipeline.artifact.writer import FOLDER
from pipeline.definition import KeyTokenDefinition, Positive
from pipeline.errors import PipelineError
from pipeline.jobs.recipe import JobResult, Record
from pipeline.keytokens.executors import ENGINE_GROUPS, Engine
from pipeline.keytokens.plan import plan_tasks
from pipeline.keytokens.selection import Documents
from pipeline.keytokens.stage import Launch, run_stage, task_steps
from pipeline.keytokens.step import KeyTokenScorer
from pipeline.loogle.data.keytoken_corpus import load_loogle_corpus
from pipeline.models.loading import ModelChoice
from pipeline.outputs import Output
from pipeline.reporting.keytoken_page import write_views
from pipeline.settings import Compute, DirectoryName, directory_name, parse, parse_group
from pipeline.text.corpus import CorpusSpec, load_corpus


@dataclass(frozen=True)
class ArtifactOutput:
    """Where the artifact goes and how its tables are laid out (one file per table, or shards)."""

    name: DirectoryName | None = None  # the artifact's directory name; None: derived
    output_dir: str = "artifacts/keytokens"
    progress: bool = True
    shard_rows: Positive | None = None  # None: one file per table; else shards of at most this many rows


@dataclass(frozen=True)
class KeyTokensJob:
    evaluator: ModelChoice
    corpus: CorpusSpec
    definition: KeyTokenDefinition
    compute: Compute
    documents: Documents
    output: ArtifactOutput
    engine: Engine = dataclasses.field(default_factory=Engine)

    model = None  # the evaluator loads in each task (``pipeline.keytokens.step``), never in the launcher
    results = None  # no results lines: the artifact is its output
    results_setting = "output_dir"
    results_kind = None
    folder_use = ("keytokens run", "pass name=<other name>")  # the lock's words (``recipe.held``)

    @classmethod
    def from_config(cls, plain: Mapping[str, Any]) -> KeyTokensJob:
        """The settings of ``conf/keytokens.yaml`` (composed, overrides applied, as plain data), typed and
        checked."""
        job = cls(
            evaluator=parse_group(ModelChoice, plain, "evaluator"),
            corpus=parse_group(CorpusSpec, plain, "corpus"),
            definition=parse(KeyTokenDefinition, plain),
            compute=parse(Compute, plain),
            documents=parse(Documents, plain),
            output=parse(ArtifactOutput, plain),
            engine=parse(
                Engine, {**plain, **{g: parse_group(o, plain, g) for g, o in ENGINE_GROUPS.items()}}
            ),
        )
        device, local = job.compute.device, job.engine.executor == "local"
        if local and device.startswith("cuda") and not torch.cuda.is_available():
            raise PipelineError(
                f"device={device} but no CUDA GPU is visible (preset=paper and preset=long ask for one): "
                f"pass device=cpu to run on the CPU anyway (in dtype={job.compute.dtype}: slow, and its "
                "rounding is not a GPU's)"
            )
        max_tokens, K = job.documents.max_tokens, job.definition.K
        if max_tokens is not None and max_tokens < K:
            raise PipelineError(
                f"setting max_tokens={max_tokens} is below K={K}: no token would have a short "
                "context; raise max_tokens or lower K"
            )
        return job

    def artifact_name(self) -> str:
        """``name``, or ``<corpus>--<evaluator>--K<K>-d<d>[-max<max_tokens>]``."""
        if self.output.name:
            return self.output.name
        evaluator = Path(self.evaluator.spec).name.removesuffix(".gguf").replace("/", "--")
        max_tokens = self.documents.max_tokens
        limit = f"-max{max_tokens}" if max_tokens else ""
        name = f"{self.corpus.name}--{evaluator}--K{self.definition.K}-d{self.definition.d}{limit}"
        return directory_name(name)

    def artifact_dir(self) -> Path:
        return Path(self.output.output_dir).absolute() / self.artifact_name()

    @property
    def folder(self) -> Path:
        """The artifact's folder, which the recipe locks for the run."""
        return self.artifact_dir()

    def outputs(self) -> list[Output]:
        return [Output("output_dir", self.artifact_dir(), FOLDER)]

    def needs_hub(self) -> bool:
        return self.corpus.needs_network or self.evaluator.needs_hub

    def open(self) -> Launch:
        """Before any model loads: where its tasks run (checked: ``Engine.check``) and the step each
        runs, then the plan: the evaluator checked, the corpus read (a row that cannot be read is
        skipped, named by its file and row), the documents chosen with the evaluator's tokenizer alone
        (its source prepared once: a GGUF file converted, a Hub id pinned), split into tasks."""
        gpus = self.engine.check(self.compute.device)
        scorer = KeyTokenScorer(self, gpus)
        self.evaluator.check()
        questions = load_loogle_corpus(self.corpus) if self.corpus.loogle else None
        unreadable: list[dict[str, str]] = []
        docs = questions.documents if questions is not None else load_corpus(self.corpus, unreadable)
        for row in unreadable:
            print(f"warning: skipped {row['doc_id']}: {row['reason']}", file=sys.stderr)
        if not docs:
            raise PipelineError(f"corpus '{self.corpus.name}' has no documents: nothing to score")
        tokens = self.evaluator.tokenizer(self.compute)
        chosen = self.documents.choose(
            docs, tokens.tokenizer, tokens.context_length, self.definition.K, self.corpus.name
        )
        plan = plan_tasks(
            self.artifact_dir(), chosen[0], unreadable + chosen[1], self.engine.tasks, tokens, questions
        )
        engine = dataclasses.replace(self.engine, tasks=1, workers=None) if plan.finished else self.engine
        executor = engine.datatrove(task_steps(plan, scorer), plan.engine, gpus)
        run = {**self.compute.record(), **self.engine.record(gpus)}
        return Launch(plan, executor, gpus, run, self.launch_record(), self.output.shard_rows)

    def launch_record(self) -> dict[str, Any]:
        """The settings a plan's completion markers hold for: all but where the tasks run and the
        progress bar."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "engine"}
        record = {name: dataclasses.asdict(value) for name, value in fields.items()}
        record["output"].pop("progress")
        record["output"].pop("shard_rows")  # how the tables are laid out, not what they hold
        return record

    @staticmethod
    def append(path: Path, row: dict[str, Any]) -> None:
        raise NotImplementedError("the keytokens job writes no results lines")

    def measure(self, lm: None, scorer: None, launch: Launch, record: Record, started: float) -> JobResult:
        """The tasks run and the artifact written (``pipeline.keytokens.stage``); then, once it is
        written, loaded with every check (later loads recall the inputs checks), counted, and given
        every document's key-token page."""
        launched = run_stage(launch, started)
        done = KeyTokensRun(
            launched.manifest, launch.plan.root, time.time() - started, 0.0, launched.submitted
        )
        done.pending = launched.pending
        if launched.manifest is not None:
            done.artifact = load_artifact(done.root)
            done.statistics = statistics(done.artifact)
            peak = max(
                resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
            )
            done.peak_gb = peak / 1024**2  # this process's, or its largest worker's
            done.views = write_views(done.root)
        return JobResult(done)


@dataclass_plain
class KeyTokensRun:
    """A keytokens run as `make keytokens` shows it (``pipeline.reporting.keytokens``): the artifact's
    manifest and location, the run's wall time and peak memory, the artifact checked and counted, and
    the index of its key-token pages; or, while a Slurm job array runs, the job and its tasks left."""

    manifest: dict[str, Any] | None
    root: Path
    seconds: float
    peak_gb: float
    submitted: str | None = None
    pending: int = 0
    artifact: KeyTokenArtifact | None = None
    statistics: dict[str, Any] | None = None
    views: Path | None = None
