"""Stage 1's plan, made by the launching process before any task runs (``KeyTokensJob.open``: the corpus
read, the documents chosen with the evaluator's tokenizer alone): the documents split into tasks balanced
by tokens (``assign``: deterministic), or one task that checks the settings of a finished artifact
(``is_finished``). Each task's documents are a Parquet shard in the engine's folder inside the artifact
(``.datatrove/documents/``, read by datatrove's ``ParquetReader``: one file per task), beside
``plan.json``, which says what the completion markers there were made for: another plan (other
settings, documents or tasks) clears them, and a task marked complete whose documents are not all
written is run again (``write_shards``).
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.artifact.reader import load_artifact
from pipeline.artifact.schema import ENGINE, MANIFEST, PARTS
from pipeline.artifact.writer import read_record
from pipeline.errors import PipelineError
from pipeline.files import write_json_atomic, write_table_atomic
from pipeline.keytokens.selection import Prepared
from pipeline.loogle.data.keytoken_corpus import LoogleCorpus
from pipeline.models.loading import LoadedTokenizer
from pipeline.provenance import json_sha256

SHARD = pa.schema(
    [
        ("id", pa.string()),
        ("text", pa.string()),  # the document's source text (each task cuts it at max_tokens again)
        ("index", pa.int64()),  # its place among the artifact's documents
        ("n_tokens", pa.int64()),  # its evaluator tokens, as the plan counted them
        ("reference_tokens", pa.int64()),
    ]
)


@dataclass
class Plan:
    """The documents of a run, which task scores each, and whether a finished artifact is already
    there (then one task checks its settings and nothing is computed: ``finished``)."""

    root: Path
    prepared: list[Prepared]
    skipped: list[dict[str, str]]
    owners: list[int]  # each document's task
    tasks: int
    tokens: LoadedTokenizer
    questions: LoogleCorpus | None
    finished: bool

    @property
    def engine(self) -> Path:
        return self.root / ENGINE

    def documents_of(self, task: int) -> list[Prepared]:
        return [p for p in self.prepared if self.owners[p.index] == task]


def plan_tasks(
    root: Path,
    prepared: list[Prepared],
    skipped: list[dict[str, str]],
    tasks: int,
    tokens: LoadedTokenizer,
    questions: LoogleCorpus | None,
) -> Plan:
    """The documents ``prepared`` split into ``tasks`` tasks; one task with no document to score when a
    finished artifact is at ``root`` (it checks the artifact's settings)."""
    finished = is_finished(root)
    tasks = 1 if finished else tasks
    owners = [0] * len(prepared) if finished else assign([len(p.ids) for p in prepared], tasks)
    return Plan(root, prepared, skipped, owners, tasks, tokens, questions, finished)


def is_finished(root: Path) -> bool:
    """Whether a finished artifact is at ``root``: its manifest reads and it loads with every check.
    One that does not (a cut manifest, an edited table) is computed anew, as its error advises."""
    try:
        if read_record(root / MANIFEST) is None:
            return False
        load_artifact(root)
        return True
    except PipelineError as exc:  # a DamagedRecord too: the manifest does not read
        print(f"note: the artifact there does not load, so it is computed anew ({exc})")
        return False


def assign(lengths: list[int], tasks: int) -> list[int]:
    """A task for each document, balanced by token count and deterministic: the longest documents
    first (ties by index), each to the task with the fewest tokens so far (ties by task)."""
    owners = [0] * len(lengths)
    loads = [(0, task) for task in range(tasks)]
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        load, task = heapq.heappop(loads)
        owners[i] = task
        heapq.heappush(loads, (load + lengths[i], task))
    return owners


def write_shards(plan: Plan, settings_record: dict[str, Any]) -> None:
    """Each task's documents as its Parquet shard, and ``plan.json``: completion markers made for
    another plan are cleared, and so is the marker of a task whose documents are not all written."""
    stamp = {
        "settings": json_sha256(settings_record),
        "tasks": [[p.index for p in plan.documents_of(task)] for task in range(plan.tasks)],
        "documents": [[p.doc.id, p.doc.sha256] for p in plan.prepared],
    }
    completions, shards = plan.engine / "completions", plan.engine / "documents"
    if read_stamp(plan.engine / "plan.json") != stamp:
        for made_for_another in (completions, shards, plan.engine / "tasks"):
            shutil.rmtree(made_for_another, ignore_errors=True)
    shutil.rmtree(plan.engine / "errors", ignore_errors=True)  # what failed before is run again
    written = {int(p.name) for p in (plan.root / PARTS).glob("[0-9]*") if p.is_dir()}
    for task, indices in enumerate(stamp["tasks"]):
        if not set(indices) <= written:
            (completions / f"{task:05d}").unlink(missing_ok=True)
        shard = [dataclasses.asdict(row) for row in shard_rows(plan.documents_of(task))]
        write_table_atomic(shards / f"{task:05d}.parquet", pa.Table.from_pylist(shard, SHARD))
    write_json_atomic(plan.engine / "plan.json", stamp)


@dataclass
class ShardRow:
    id: str
    text: str
    index: int
    n_tokens: int
    reference_tokens: int | None


def shard_rows(prepared: list[Prepared]) -> list[ShardRow]:
    return [ShardRow(p.doc.id, p.doc.text, p.index, len(p.ids), p.doc.reference_tokens) for p in prepared]


def read_stamp(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
