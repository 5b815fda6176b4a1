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
from tqdm.auto import tqdm

from pipeline.artifact import lock
from pipeline.artifact.qa import kept_records
from pipeline.artifact.reader import load_artifact
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.artifact.statistics import statistics
from pipeline.artifact.writer import ArtifactWriter, OtherSettings
from pipeline.definition import KeyTokenDefinition
from pipeline.errors import PipelineError
from pipeline.hub import offline_unless
from pipeline.keytokens import ranks as distributed
from pipeline.keytokens.selection import Documents, Prepared, Selection, document_records, select
from pipeline.keytokens.tables import keytoken_tables
from pipeline.loogle.data.keytoken_corpus import LoogleCorpus, load_loogle_corpus
from pipeline.models.loading import LoadedModel, ModelChoice
from pipeline.models.logprobs import scorer_for
from pipeline.models.sources import is_gguf, is_local_model
from pipeline.provenance import library_versions
from pipeline.reporting.keytoken_page import write_views
from pipeline.settings import Compute, DirectoryName, directory_name, parse
from pipeline.text.corpus import CorpusSpec, Document, load_corpus
from pipeline.text.tokenization import encode_with_offsets


@dataclass(frozen=True)
class Output:
    name: DirectoryName | None = None  # the artifact's directory name; None: derived
    output_dir: str = "artifacts/keytokens"
    progress: bool = True


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
            evaluator=ModelChoice.parse(plain.get("evaluator") or {}, "evaluator."),
            corpus=CorpusSpec.parse(plain.get("corpus") or {}),
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
    """The whole run; returns the artifact's manifest. Rank 0 holds the artifact directory's lock
    (``pipeline.artifact.lock``) throughout: a second run on the same artifact stops at once."""
    started = time.time()
    offline_unless(settings.corpus.needs_network, not is_local_model(settings.evaluator.spec))
    settings.evaluator.check()
    docs, questions = corpus_documents(settings.corpus)
    if not docs:
        raise PipelineError(f"corpus '{settings.corpus.name}' has no documents: nothing to score")
    ranks = distributed.init_ranks(use_cuda=wants_cuda(settings.compute.device))
    with ExitStack() as stack:
        if ranks.is_main:
            stack.enter_context(lock.exclusive(settings.artifact_dir(), "keytokens run"))
        return locked_run(settings, docs, ranks, started, questions)


def corpus_documents(spec: CorpusSpec) -> tuple[list[Document], LoogleCorpus | None]:
    """The corpus's documents and, for a corpus with questions (LooGLE's), those questions."""
    if spec.loogle:
        loogle = load_loogle_corpus(spec)
        return loogle.documents, loogle
    return load_corpus(spec), None


def locked_run(
    settings: KeyTokenSettings,
    docs: list,
    ranks: distributed.Ranks,
    started: float,
    questions: LoogleCorpus | None = None,
) -> dict[str, Any]:
    """The run, with the lock held: a finished artifact is left as it is, an unfinished one resumed;
    a run that fails before its first document is written leaves nothing behind. The questions of a
    corpus that has them go beside the tables, for the documents scored."""
    lm = load_evaluator(settings, ranks)
    selection = select(docs, lm, settings.definition, settings.documents, settings.corpus, settings.compute)
    writer = ArtifactWriter(settings.artifact_dir(), selection.record, selection.fingerprint)
    finished = finished_artifact(writer, ranks.is_main)
    if finished is not None:
        if ranks.is_main:
            print(f"{writer.root} is complete with these settings: nothing to do")
        distributed.shutdown(ranks)
        return finished
    writer.start()
    resumed = len(writer.finished())
    try:
        score_documents(lm, selection.prepared, settings, writer, ranks)
    except BaseException:
        if ranks.is_main:
            writer.discard_if_empty()
        raise
    devices = ranks.gather(lm.placement)
    manifest = None
    if ranks.is_main:
        extra = manifest_extra(selection, devices, settings, resumed, time.time() - started)
        qa = None
        if questions is not None:
            qa = questions.tables([p.doc.id for p in selection.prepared])
            extra["questions"] = question_record(questions, qa, selection.prepared, lm)
        manifest = writer.finalize(range(len(selection.prepared)), extra, qa)
    ranks.barrier()  # rank 0 has finalized
    distributed.shutdown(ranks)
    return manifest or load_artifact(writer.root).manifest


def finished_artifact(writer: ArtifactWriter, is_main: bool) -> dict[str, Any] | None:
    """The manifest of the finished artifact with these settings already there, if it loads with every
    check. One that does not (a damaged manifest, an edited table) is computed anew, as its error
    advises; one with other settings is an error (``ArtifactWriter.is_complete``)."""
    problem = None
    try:
        if writer.is_complete():
            return load_artifact(writer.root).manifest
    except PipelineError as exc:
        if isinstance(exc, OtherSettings):
            raise
        problem = exc
    if problem is not None and is_main:
        print(f"note: the artifact there does not load, so it is computed anew ({problem})")
    return None


def question_record(questions: LoogleCorpus, qa: dict, prepared: list[Prepared], lm: LoadedModel) -> dict:
    """The manifest's ``questions`` record: where they came from, and what the cut keeps of each
    document and its evidence (a truncated text's source tokenized whole, as stage 1 first does)."""
    documents = [
        {
            "doc_id": p.doc.id,
            "n_tokens": len(p.ids),
            "n_source_tokens": len(encode_with_offsets(lm.tokenizer, p.doc.text).ids)
            if p.truncated
            else len(p.ids),
            "n_chars": len(p.text),
            "n_source_chars": len(p.doc.text),
        }
        for p in prepared
    ]
    return {**questions.record, "documents": kept_records(qa, documents)}


def wants_cuda(device: str) -> bool:
    return device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())


def load_evaluator(settings: KeyTokenSettings, ranks: distributed.Ranks) -> LoadedModel:
    """Load the evaluator on each rank's own slice of the node's GPUs (one GPU, or several with
    device_map=auto), all ranks at once; a GGUF evaluator (its one-time conversion into the cache)
    on rank 0 first, the others once it is done."""
    gpus, compute = None, settings.compute
    if ranks.gpus:
        gpus = list(ranks.gpus)
        if not settings.evaluator.device_map:
            compute = dataclasses.replace(compute, device=f"cuda:{gpus[0]}")
    converts = is_gguf(settings.evaluator.spec)  # the same on every rank: they all meet the barrier
    if converts and not ranks.is_main:
        ranks.barrier()
    lm = settings.evaluator.load(compute, gpus=gpus)
    if converts and ranks.is_main:
        ranks.barrier()
    return lm


def score_documents(
    lm: LoadedModel,
    prepared: list[Prepared],
    settings: KeyTokenSettings,
    writer: ArtifactWriter,
    ranks: distributed.Ranks,
) -> None:
    """Score and write this rank's unfinished documents; progress is counted in tokens, for an
    honest ETA (one set of bars: rank 0's, since ranks are balanced)."""
    scorer = scorer_for(lm, settings.compute)
    scorer.check_against_full_forward()
    bos_id = lm.bos_token_id if settings.documents.add_bos else None
    owners = distributed.assign([len(p.ids) for p in prepared], ranks.world)
    mine = [p for p in prepared if owners[p.index] == ranks.rank]
    done = writer.finished()
    show = settings.output.progress and ranks.is_main

    def windows(batches):
        return tqdm(batches, desc="  short windows", unit="batch", leave=False, disable=not show)

    total = sum(len(p.ids) for p in mine)
    initial = sum(len(p.ids) for p in mine if p.index in done)
    with tqdm(
        total=total, initial=initial, desc="documents", unit="tok", unit_scale=True, disable=not show
    ) as bar:
        for item in (p for p in mine if p.index not in done):
            bar.set_postfix_str(item.doc.id)
            tables = keytoken_tables(scorer, item, settings.definition, bos_id, progress=windows)
            writer.write_part(item.index, *tables)
            bar.update(len(item.ids))
    ranks.barrier()  # every rank's parts are written


def manifest_extra(
    selection: Selection, devices: list[str], settings: KeyTokenSettings, resumed: int, seconds: float
) -> dict[str, Any]:
    """The manifest beside the settings: documents, skipped documents, libraries, how the run ran."""
    return {
        "documents": document_records(selection.prepared),
        "skipped": selection.skipped,
        "libraries": library_versions(),
        "run": {
            "device": devices[0],
            "devices": devices,  # each rank's, with indices
            **settings.compute.record(),
            "wall_seconds": round(seconds, 1),
            "resumed_documents": resumed,
            "processes": len(devices),
        },
    }


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
