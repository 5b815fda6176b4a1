"""One task of stage 1, as a datatrove pipeline step (``KeyTokenScorer``), after the reader of its shard
(``pipeline.keytokens.plan``). At its first document it loads the evaluator, once, in its own process,
on its own GPUs (the local executor: its worker's share, ``gpus`` from ``gpus * worker``; Slurm and
Ray: the GPUs the scheduler gave it), through ``ModelChoice.load`` and ``scorer_for`` as every job's
model does; it records the settings it runs with in ``run.json`` (the first task writes them, every
other task checks its own against them: a task resumed or run beside others with other settings
stops); then it writes each document as a part (``ArtifactWriter.write_part``), passing over a
finished one (a task resumes from its last finished document). A task with no document loads nothing.

Each document leaves the step with its row of ``documents.parquet`` (tokens, key tokens, spans,
truncation; not its text) in its metadata, so a writer step after this one (datatrove's
``ParquetWriter``) can write those per-document columns as shards. What a task leaves for its launcher
lies in the engine's folder: ``running/<task>.json`` (its process, from its start), ``tasks/<task>.json``
(where it ran, what it did, once it is done) and, when it fails, ``errors/<task>.json`` (why).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from datatrove.data import Document as Row
from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from tqdm.auto import tqdm

from pipeline.artifact.schema import MANIFEST, RUN_STATE, settings_fingerprint
from pipeline.artifact.writer import ArtifactWriter, DamagedRecord, read_record
from pipeline.errors import PipelineError
from pipeline.files import write_json_atomic
from pipeline.keytokens.executors import record_task_error
from pipeline.keytokens.plan import ENGINE, Plan
from pipeline.keytokens.selection import Prepared, document_sources, settings_record
from pipeline.keytokens.tables import keytoken_tables
from pipeline.models.loading import LoadedModel
from pipeline.models.logprobs import scorer_for
from pipeline.settings import Compute
from pipeline.text.corpus import Document
from pipeline.text.tokenization import encode_truncated

LOCAL = "local"  # the executor that binds a task's GPUs by its worker's slot


class KeyTokenScorer(PipelineStep):
    """Stage 1 on one task's documents (module docstring). ``settings``: a ``KeyTokensJob``; ``gpus``:
    each task's GPUs. What it needs of the plan comes with ``planned``."""

    name = "LongPPL key tokens"
    type = "🔑 - SCORER"

    def __init__(self, settings: Any, gpus: int) -> None:
        super().__init__()
        self.settings, self.gpus = settings, gpus
        self.executor, self.root = settings.engine.executor, settings.artifact_dir()
        self.worker = 0  # the local executor's worker slot, set before each task runs
        self.sources: list[dict[str, str]] = []  # the settings record's documents (every task's)
        self.questions: dict[str, Any] | None = None  # a LooGLE corpus's identity
        self.finished = False  # a finished artifact is there: check its settings, compute nothing
        self.tokens: list[int] = []  # each task's evaluator tokens (its progress bar's total)

    def planned(self, plan: Plan) -> None:
        """What the tasks need of ``plan``; a Hub evaluator pinned to the commit the plan read."""
        self.sources, self.finished = document_sources(plan.prepared), plan.finished
        self.questions = plan.questions.identity() if plan.questions is not None else None
        self.tokens = [sum(len(p.ids) for p in plan.documents_of(task)) for task in range(plan.tasks)]
        source = plan.tokens.source
        if source.kind == "hub":
            evaluator = dataclasses.replace(self.settings.evaluator, revision=source.revision)
            self.settings = dataclasses.replace(self.settings, evaluator=evaluator)

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        """This task's documents scored and written, each passed on with its columns; a failure is
        left in ``errors/<task>.json`` for the launcher, and raised."""
        try:
            yield from self.score(iter(data or ()), rank)
        except Exception as exc:
            record_task_error(self.root / ENGINE, rank, exc)
            raise

    def score(self, documents: Iterator[Row], rank: int) -> Iterator[Row]:
        started = time.time()
        first = next(documents, None)
        if first is None and not self.finished:
            return
        running = {"pid": os.getpid(), "host": socket.gethostname(), "since": round(started, 3)}
        write_json_atomic(self.root / ENGINE / "running" / f"{rank:05d}.json", running)
        lm, compute = self.evaluator()
        scorer = scorer_for(lm, compute, len(self.sources))  # compile=auto: the run's texts repay it?
        writer = ArtifactWriter(self.root, *self.record(lm))
        if self.finished:
            writer.is_complete()  # the same settings, or OtherSettings
            lm.source.settle()  # the weights' hashes: those the finished artifact records, or an error
            return
        writer.start()
        scorer.check_against_full_forward()
        bos_id = lm.bos_token_id if self.settings.documents.add_bos else None
        done, counts = writer.finished(), {"scored": 0, "resumed": 0}
        with self.bar(rank) as bar:
            for row in itertools.chain([first], documents):
                item = self.prepared(row, lm)
                bar.set_postfix_str(item.doc.id)
                if item.index in done:
                    counts["resumed"] += 1
                    row.metadata |= writer.read_part(item.index, "documents").to_pylist()[0]
                else:
                    with self.track_time():
                        tables = keytoken_tables(scorer, item, self.settings.definition, bos_id, self.windows)
                    writer.write_part(item.index, *tables)
                    counts["scored"] += 1
                    row.metadata |= tables[0]
                row.metadata.pop("text", None)
                self.stat_update("documents")
                self.stat_update("tokens", value=len(item.ids))
                bar.update(len(item.ids))
                yield row
        lm.source.settle()  # the weights' hashes, waited for only now; other weights stop the task here
        task = {"placement": lm.placement, "seconds": round(time.time() - started, 1), **counts,
                "evaluator": lm.source.to_dict()}  # fmt: skip
        write_json_atomic(self.root / ENGINE / "tasks" / f"{rank:05d}.json", task)

    def evaluator(self) -> tuple[LoadedModel, Compute]:
        """The evaluator on this task's GPUs (each bound to its first one, unless a device map spreads
        it over them all), and the compute settings it runs with."""
        compute, gpus = self.settings.compute, self.task_gpus()
        if gpus and not self.settings.evaluator.device_map:
            compute = dataclasses.replace(compute, device=f"cuda:{gpus[0]}")
            torch.cuda.set_device(gpus[0])
        return self.settings.evaluator.load(compute, gpus=gpus), compute

    def task_gpus(self) -> list[int] | None:
        """This task's GPUs: on the local executor its worker's slice of the machine's, elsewhere
        those its scheduler made visible to it (CUDA_VISIBLE_DEVICES); None: none of its own, or a
        device named with its index (``device=cuda:1``), which is taken as it is."""
        if not self.gpus or ":" in self.settings.compute.device:
            return None
        first = self.worker * self.gpus if self.executor == LOCAL else 0
        return list(range(first, first + self.gpus))

    def record(self, lm: LoadedModel) -> tuple[dict[str, Any], str]:
        """The settings record of the loaded evaluator (the manifest's ``settings``) and its fingerprint;
        the evaluator as far as it is known without waiting for its weights' hashes (by their files'
        versions, or the hashes an earlier run on this artifact recorded: checked when they settle)."""
        s = self.settings
        evaluator = lm.source.provisional(*recorded_weights(self.root))
        record = settings_record(s.definition, s.documents, s.corpus, lm, s.compute, self.sources, evaluator)
        record |= {"questions": self.questions} if self.questions is not None else {}
        return record, settings_fingerprint(record)

    def prepared(self, row: Row, lm: LoadedModel) -> Prepared:
        """A shard's row as the plan prepared it: its text cut again at ``max_tokens`` by the task's own
        tokenizer, which must give the plan's token count (the same evaluator)."""
        meta = row.metadata
        text, enc, truncated = encode_truncated(lm.tokenizer, row.text, self.settings.documents.max_tokens)
        if len(enc.ids) != meta["n_tokens"]:
            raise PipelineError(
                f"document '{row.id}': this task's tokenizer gives {len(enc.ids)} tokens, the plan's gave "
                f"{meta['n_tokens']}: the task does not run the evaluator the plan read (another "
                "transformers or tokenizers version where it runs?)"
            )
        doc = Document(row.id, row.text, meta["reference_tokens"])
        return Prepared(meta["index"], doc, text, enc.ids, enc.offsets, enc.offsets_from, truncated)

    def bar(self, rank: int) -> tqdm:
        """Progress in evaluator tokens of the first worker's tasks, on the local executor only."""
        show = self.settings.output.progress and self.executor == LOCAL and self.worker == 0
        desc = "documents" if len(self.tokens) == 1 else f"task {rank}"
        return tqdm(total=self.tokens[rank], desc=desc, unit="tok", unit_scale=True, disable=not show)

    def windows(self, batches: Iterator) -> Iterator:
        show = self.settings.output.progress and self.executor == LOCAL and self.worker == 0
        return tqdm(batches, desc="  short windows", unit="batch", leave=False, disable=not show)


def recorded_weights(root: Path) -> tuple[dict[str, str] | None, str]:
    """The evaluator's weight hashes an earlier run on this artifact recorded (its ``run.json``, else its
    manifest), and which file says so; (None, "") where none did."""
    for name in (RUN_STATE, MANIFEST):
        with contextlib.suppress(DamagedRecord):
            evaluator = ((read_record(root / name) or {}).get("settings") or {}).get("evaluator")
            if isinstance(evaluator, dict) and isinstance(evaluator.get("weights_sha256"), dict):
                return evaluator["weights_sha256"], str(root / name)
    return None, ""
