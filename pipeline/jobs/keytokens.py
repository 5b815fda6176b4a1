"""The keytokens job (`make keytokens`): an evaluator reads a corpus and writes the key-token artifact.
Its settings are typed and checked once from the Hydra config (``KeyTokenSettings``: evaluator, corpus,
definition, compute, documents and output), before any model loads.

Steps: load the corpus and the evaluator, choose and tokenize the documents, fingerprint the settings
(a finished artifact with the same fingerprint is left untouched; an unfinished one is resumed), score
this rank's documents one part at a time, then (rank 0) write the tables and the manifest. The
command (``python -m pipeline.commands.keytokens``) adds the summary and the key-token pages.
"""

from __future__ import annotations

import dataclasses
import resource
import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass as dataclass_plain
from pathlib import Path
from typing import Any

import torch
from pydantic.dataclasses import dataclass

from pipeline.artifact import lock
from pipeline.artifact.reader import load_artifact
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.artifact.statistics import statistics
from pipeline.artifact.writer import check_output
from pipeline.definition import KeyTokenDefinition, Positive
from pipeline.errors import PipelineError
from pipeline.hub import offline_unless
from pipeline.keytokens import ranks as distributed
from pipeline.keytokens.selection import Documents
from pipeline.keytokens.stage import write_keytokens
from pipeline.loogle.data.keytoken_corpus import load_loogle_corpus
from pipeline.models.loading import ModelChoice
from pipeline.models.logprobs import scorer_for
from pipeline.models.sources import is_gguf
from pipeline.reporting.keytoken_page import write_views
from pipeline.settings import Compute, DirectoryName, directory_name, parse, parse_group
from pipeline.text.corpus import CorpusSpec, load_corpus


@dataclass(frozen=True)
class Output:
    name: DirectoryName | None = None  # the artifact's directory name; None: derived
    output_dir: str = "artifacts/keytokens"
    progress: bool = True
    shard_rows: Positive | None = None  # None: one file per table; else shards of at most this many rows


@dataclass(frozen=True)
class KeyTokenSettings:
    evaluator: ModelChoice
    corpus: CorpusSpec
    definition: KeyTokenDefinition
    compute: Compute
    documents: Documents
    output: Output

    @classmethod
    def from_config(cls, plain: Mapping[str, Any]) -> KeyTokenSettings:
        """The settings of ``conf/keytokens.yaml`` (composed, overrides applied, as plain data), typed and
        checked."""
        settings = cls(
            evaluator=parse_group(ModelChoice, plain, "evaluator"),
            corpus=parse_group(CorpusSpec, plain, "corpus"),
            definition=parse(KeyTokenDefinition, plain),
            compute=parse(Compute, plain),
            documents=parse(Documents, plain),
            output=parse(Output, plain),
        )
        if settings.compute.device.startswith("cuda") and not torch.cuda.is_available():
            raise PipelineError(
                f"device={settings.compute.device} but no CUDA GPU is visible (preset=paper and preset=long "
                f"ask for one): pass device=cpu to run on the CPU anyway (in dtype={settings.compute.dtype}: "
                "slow, and its rounding is not a GPU's)"
            )
        max_tokens, K = settings.documents.max_tokens, settings.definition.K
        if max_tokens is not None and max_tokens < K:
            raise PipelineError(
                f"setting max_tokens={max_tokens} is below K={K}: no token would have a short "
                "context; raise max_tokens or lower K"
            )
        return settings

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


def run(settings: KeyTokenSettings) -> dict[str, Any]:
    """The whole run, top to bottom: the corpus's documents, this process's rank, the artifact
    directory's lock (rank 0, throughout: a second run on the same artifact stops at once), the
    evaluator and its scorer, then the stage (``pipeline.keytokens.stage``); returns the manifest."""
    started = time.time()
    check_output(settings.artifact_dir())
    offline_unless(settings.corpus.needs_network, settings.evaluator.needs_hub)
    settings.evaluator.check()
    questions = load_loogle_corpus(settings.corpus) if settings.corpus.loogle else None  # LooGLE's
    docs = load_corpus(settings.corpus) if questions is None else questions.documents
    if not docs:
        raise PipelineError(f"corpus '{settings.corpus.name}' has no documents: nothing to score")
    ranks = distributed.init_ranks(use_cuda=wants_cuda(settings.compute.device))
    with ExitStack() as stack:
        if ranks.is_main:
            stack.enter_context(lock.exclusive(settings.artifact_dir(), "keytokens run"))
        gpus = list(ranks.gpus) if ranks.gpus else None
        bound = gpus is not None and not settings.evaluator.device_map  # each rank its own GPU
        compute = (
            dataclasses.replace(settings.compute, device=f"cuda:{gpus[0]}") if bound else settings.compute
        )
        with distributed.rank_zero_first(ranks, is_gguf(settings.evaluator.spec)):  # a GGUF conversion, once
            lm = settings.evaluator.load(compute, gpus=gpus)
        texts = min(len(docs), settings.documents.num_documents or len(docs))  # compile=auto: enough?
        return write_keytokens(settings, docs, questions, lm, scorer_for(lm, compute, texts), ranks, started)


def wants_cuda(device: str) -> bool:
    return device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())


@dataclass_plain
class KeyTokensRun:
    """A finished keytokens run as `make keytokens` shows it (``pipeline.reporting.keytokens``): the
    artifact's manifest and location, the run's wall time and peak memory, the artifact checked and
    counted (rank 0 only; other ranks: None), and the index of its key-token pages."""

    manifest: dict[str, Any]
    root: Path
    seconds: float
    peak_gb: float
    artifact: KeyTokenArtifact | None = None
    statistics: dict[str, Any] | None = None
    views: Path | None = None


def make_keytokens(settings: KeyTokenSettings) -> KeyTokensRun:
    """The run; then, on rank 0, the artifact loaded with every check (later loads recall the inputs
    checks), its counts, and every document's key-token page."""
    started = time.time()
    manifest = run(settings)
    done = KeyTokensRun(manifest, settings.artifact_dir(), time.time() - started, 0.0)
    if distributed.is_main_process():
        done.artifact = load_artifact(done.root)
        done.statistics = statistics(done.artifact)
        done.peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
        done.views = write_views(done.root)
    return done
