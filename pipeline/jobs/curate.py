"""The curate job (`make curate`): a corpus of Parquet or JSONL shards written back as Parquet shards with
stage 1's per-document columns (``longppl_*``: ``pipeline.artifact.columns``), for data selection. It runs
through the recipe as every job does (the offline rule, its output folder locked, its inputs checked
before any model loads), on stage 1's executors (``pipeline.keytokens.executors``: local, Slurm, Ray;
``tasks``, ``workers``, ``gpus_per_task``) with stage 1's step (``pipeline.keytokens.curation``).

Its output folder holds ``train-<task>-of-<tasks>.parquet`` in its data folder, ``.datatrove``
(datatrove's logs, completion markers and stats) and, once every task is complete, ``curate.json``
(the settings, the evaluator's identity, the input's files, the shards and their rows). A folder it
did not make is refused (``pipeline.outputs``); one it made with other settings too; with the same
settings the run resumes (the tasks not marked complete run again, each its own shard) or, finished,
does nothing.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pyarrow.parquet as pq
from pydantic.dataclasses import dataclass

from pipeline.artifact.columns import COLUMNS
from pipeline.definition import KeyTokenDefinition, Positive
from pipeline.errors import PipelineError
from pipeline.files import write_json_atomic
from pipeline.jobs.recipe import JobResult, Record
from pipeline.keytokens.curation import (
    DATA,
    ENGINE,
    RECORD,
    CorpusInput,
    CurationScorer,
    FinishShard,
    inspect_corpus,
    shard_name,
    shard_writer,
)
from pipeline.keytokens.executors import ENGINE_GROUPS, Engine, launch, task_error
from pipeline.marks import marked_folder
from pipeline.models.loading import ModelChoice, one_line
from pipeline.outputs import Output, check, make_folder
from pipeline.provenance import json_sha256
from pipeline.settings import Compute, Text, parse, parse_group

# Its output folder: new, empty, or one it made (its marker), checked before any model loads.
CURATED = marked_folder("curate")


@dataclass(frozen=True)
class CorpusFiles:
    """The corpus (``input.<key>=``): a folder of shards or one file, read by datatrove's readers."""

    path: Text
    format: Literal["parquet", "jsonl"] | None = None  # None: from the files' extension
    text_key: Text = "text"
    id_key: Text = "id"


@dataclass(frozen=True)
class CurateJob:
    evaluator: ModelChoice
    input: CorpusFiles
    definition: KeyTokenDefinition
    compute: Compute
    output_dir: Text
    max_tokens: Positive | None = None
    add_bos: bool = True
    engine: Engine = dataclasses.field(default_factory=Engine)

    model = None  # the evaluator loads in each task (``pipeline.keytokens.curation``)
    results = None
    results_setting = "output_dir"
    results_kind = None
    folder_use = ("curate run", "pass output_dir=<another folder>")

    @classmethod
    def from_config(cls, plain: Mapping[str, Any]) -> CurateJob:
        """The settings of ``conf/curate.yaml``, typed and checked."""
        if not plain.get("input", {}).get("path"):
            raise PipelineError(
                "setting input.path is missing: pass input.path=<folder of Parquet or JSONL shards>"
            )
        groups = {g: parse_group(o, plain, g) for g, o in ENGINE_GROUPS.items()}
        return cls(
            evaluator=parse_group(ModelChoice, plain, "evaluator"),
            input=parse(CorpusFiles, plain["input"], prefix="input.", strict=True),
            definition=parse(KeyTokenDefinition, plain),
            compute=parse(Compute, plain),
            output_dir=plain["output_dir"],
            max_tokens=plain.get("max_tokens"),
            add_bos=plain.get("add_bos", True),
            engine=parse(Engine, {**plain, **groups}),
        )

    @property
    def folder(self) -> Path:
        return Path(self.output_dir).absolute()

    def outputs(self) -> list[Output]:
        return [Output("output_dir", self.folder, CURATED)]

    def needs_hub(self) -> bool:
        return False

    def settings_record(self, corpus: CorpusInput) -> dict[str, Any]:
        """What the columns depend on: the evaluator, the definition, the compute settings, the cut, and
        the input's files (names and sizes)."""
        files = [[name, (corpus.folder / name).stat().st_size] for name in corpus.files]
        return {
            "evaluator": dataclasses.asdict(self.evaluator),
            "definition": self.definition.record(),
            "compute": self.compute.record(),
            "max_tokens": self.max_tokens,
            "add_bos": self.add_bos,
            "input": {**dataclasses.asdict(self.input), "format": corpus.format, "files": files},
            "tasks": self.engine.tasks,
        }

    def open(self) -> tuple[Any, dict[str, Any], bool, int]:
        """Before any model loads: where the tasks run, the corpus checked, the output folder checked
        (``own_folder``), and the executor of the tasks."""
        gpus = self.engine.check(self.compute.device)
        self.evaluator.check()
        s = self.input
        corpus = inspect_corpus(s.path, s.format, s.text_key, s.id_key)
        settings = self.settings_record(corpus)
        finished = own_folder(make_folder(check(Output("output_dir", self.folder, CURATED))), settings)
        tasks, out = self.engine.tasks, self.folder
        steps = [
            corpus.reader(by_rows=len(corpus.files) < tasks),
            CurationScorer(self, gpus),
            shard_writer(corpus, out, tasks),
            FinishShard(out, tasks, corpus.output_schema()),
        ]
        return self.engine.datatrove(steps, out / ENGINE, gpus), settings, finished, gpus

    @staticmethod
    def append(target: Any, row: dict[str, Any]) -> None:
        raise NotImplementedError("the curate job writes no results lines")

    def measure(self, lm: None, scorer: None, opened: tuple, record: Record, started: float) -> JobResult:
        """The tasks run (or, on Slurm, submitted); once all are complete, ``curate.json``."""
        executor, settings, finished, gpus = opened
        if finished:
            print(f"{self.folder} is complete with these settings: nothing to do")
            return JobResult(json.loads((self.folder / RECORD).read_text(encoding="utf-8")))
        launch(executor, gpus)
        pending = executor.get_incomplete_ranks()
        if pending and getattr(executor, "job_id", None) not in (None, -1):
            return JobResult({"submitted": str(executor.job_id), "pending": len(pending)})
        if pending:
            raise not_finished(self.folder, pending, self.engine.tasks, getattr(executor, "failures", {}))
        return JobResult(write_record(self.folder, settings, self.engine.tasks, started))


def not_finished(
    out: Path, pending: list[int], tasks: int, failures: dict[int, BaseException]
) -> PipelineError:
    """The tasks that did not finish, the first one's error (when it ran in this process) and its log."""
    first, log = pending[0], out / ENGINE / "logs" / f"task_{pending[0]:05d}.log"
    recorded = task_error(out / ENGINE, first)  # errors/<task>.json: a task in a process of its own
    why = (
        f": {one_line(failures[first], 500)}"
        if first in failures
        else f": {recorded}"
        if recorded
        else ": its process ended before it finished (killed by a signal, or out of memory?)"
    )
    return PipelineError(
        f"{len(pending)} of {tasks} tasks did not finish (the others are complete and kept): task {first}"
        f"{why}; its log: {log}; run the same command again to run them (each redoes its own shard)"
    )


def own_folder(out: Path, settings: dict[str, Any]) -> bool:
    """Whether ``out`` (this command's: checked) holds a finished curation with these settings; one made
    with other settings is refused; one begun with these settings is resumed."""
    stamp = {"settings": json_sha256(settings)}
    plan = out / ENGINE / "plan.json"
    if (out / RECORD).is_file():
        if json.loads((out / RECORD).read_text(encoding="utf-8")).get("plan") == stamp["settings"]:
            return True
        raise PipelineError(
            f"output_dir={out} holds a curation made with other settings (its {RECORD}): pass "
            "output_dir=<another folder>, or the same settings to use it"
        )
    if plan.is_file():
        if json.loads(plan.read_text(encoding="utf-8")) != stamp:
            raise PipelineError(
                f"output_dir={out} holds an unfinished curation begun with other settings ({plan}): pass "
                "output_dir=<another folder>, or its settings to resume it"
            )
    else:
        write_json_atomic(plan, stamp)
    return False


def write_record(out: Path, settings: dict[str, Any], tasks: int, started: float) -> dict[str, Any]:
    """``curate.json``: the settings, the evaluator's identity (as the tasks loaded it), the shards."""
    ran = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((out / ENGINE / "tasks").glob("*.json"))]
    evaluators = {json.dumps(t["evaluator"], sort_keys=True) for t in ran if "evaluator" in t}
    if len(evaluators) > 1:
        raise PipelineError(f"the tasks of {out} loaded different evaluators ({out / ENGINE / 'tasks'}): "
                            "curate again into another folder with one evaluator")  # fmt: skip
    shards = [shard_name(task, tasks) for task in range(tasks)]
    rows = [pq.read_metadata(out / DATA / name).num_rows for name in shards]
    record = {
        "plan": json_sha256(settings),
        "settings": settings,
        "evaluator": json.loads(evaluators.pop()) if evaluators else None,
        "columns": COLUMNS,
        "shards": dict(zip(shards, rows, strict=True)),
        "rows": sum(rows),
        "tokens": sum(t.get("tokens", 0) for t in ran),
        "task_seconds": round(sum(t.get("seconds", 0) for t in ran), 3),
        "wall_seconds": round(time.time() - started, 3),
        "output_dir": str(out),
    }
    write_json_atomic(out / RECORD, record)
    return record
