"""Stage 1 from its plan to its artifact, in the launching process: each task's pipeline (datatrove's
``ParquetReader`` of its shard, then ``KeyTokenScorer``), the executor run (or, on Slurm, its job array
submitted: run the command again once it is done), the tasks that did not finish named with why, and,
once every task is complete, their parts merged in document order into the artifact with the settings
the tasks recorded (``ArtifactWriter.finalize``) and the engine's folder removed: the finished
artifact is its files alone, and its manifest's ``run`` says how it ran. A run that fails before its
first document is written leaves nothing behind; one that fails later keeps its parts and the engine's
folder (completion markers, logs), and the next run resumes them. With a finished artifact there, one
task checks that it was made with these settings (else ``OtherSettings``) and nothing is computed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datatrove.executor.base import PipelineExecutor
from datatrove.pipeline.readers import ParquetReader

from pipeline.artifact.qa import kept_records
from pipeline.artifact.reader import load_artifact
from pipeline.artifact.schema import settings_fingerprint
from pipeline.artifact.writer import ArtifactWriter
from pipeline.errors import PipelineError
from pipeline.files import write_json_atomic
from pipeline.keytokens.executors import launch as launch_tasks
from pipeline.keytokens.executors import task_error
from pipeline.keytokens.plan import Plan, write_shards
from pipeline.keytokens.selection import Prepared, document_records
from pipeline.keytokens.step import KeyTokenScorer
from pipeline.loogle.data.keytoken_corpus import LoogleCorpus
from pipeline.provenance import library_versions
from pipeline.text.tokenization import encode_with_offsets


@dataclass
class Launch:
    """What ``KeyTokensJob.open`` makes before any model loads: the plan, the executor of its tasks (each
    task's GPUs: ``gpus``), and what the manifest's ``run`` and the engine's ``plan.json`` record of the
    settings (``run``, ``settings``)."""

    plan: Plan
    executor: PipelineExecutor
    gpus: int
    run: dict[str, Any]
    settings: dict[str, Any]
    shard_rows: int | None = None  # the tables in shards of at most this many rows (None: one file each)


@dataclass
class Launched:
    """What a launch did: the artifact's manifest (None while a Slurm job array runs), the Slurm job
    submitted, and the tasks it left to run."""

    manifest: dict[str, Any] | None
    submitted: str | None = None
    pending: int = 0


def run_stage(launch: Launch, started: float) -> Launched:
    """The tasks of the plan run, then the artifact written (module docstring)."""
    plan, executor = launch.plan, launch.executor
    resumed = len(ArtifactWriter(plan.root, {}, "").finished())
    slurm_job_running(plan)
    try:
        earlier_failures(plan)
        write_shards(plan, launch.settings)
        launch_tasks(executor, launch.gpus)
        pending = executor.get_incomplete_ranks()
        if pending and getattr(executor, "job_id", None) not in (None, -1):
            write_json_atomic(plan.engine / "slurm.json", {"job": str(executor.job_id)})
            return Launched(None, str(executor.job_id), len(pending))
        if pending:
            raise not_finished(plan, pending, getattr(executor, "failures", {}))
        if plan.finished:
            print(f"{plan.root} is complete with these settings: nothing to do")
            manifest = load_artifact(plan.root).manifest
        else:
            manifest = finalize(launch, resumed, started)
    except BaseException:
        give_up(plan)
        raise
    shutil.rmtree(plan.engine, ignore_errors=True)
    return Launched(manifest)


def task_steps(plan: Plan, scorer: KeyTokenScorer) -> list:
    """Each task's steps: its shard read (``[0-9]*.parquet``: never a file being written), then scored."""
    scorer.planned(plan)
    return [ParquetReader(str(plan.engine / "documents"), glob_pattern="[0-9]*.parquet"), scorer]


def not_finished(plan: Plan, pending: list[int], failures: dict[int, BaseException]) -> BaseException:
    """Why tasks did not finish: the one task's own error when it ran in this process, else a
    PipelineError naming the first task, why it stopped and where its log is."""
    first = pending[0]
    if plan.tasks == 1 and first in failures:
        return failures[first]
    why = task_error(plan.engine, first) or (
        f"its process{running_process(plan.engine, first)} ended before it finished (killed by a signal, "
        "or out of memory?)"
    )
    if plan.tasks == 1:
        return PipelineError(why)
    return PipelineError(
        f"{len(pending)} of {plan.tasks} tasks did not finish (the others are complete and kept): task "
        f"{first}: {why}; its log: {plan.engine / 'logs' / f'task_{first:05d}.log'}; run the same command "
        "again to run them (each resumes from its last finished document)"
    )


def running_process(engine: Path, task: int) -> str:
    try:
        record = json.loads((engine / "running" / f"{task:05d}.json").read_text(encoding="utf-8"))
        return f" (pid {record['pid']} on {record['host']})"
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def slurm_job_running(plan: Plan) -> None:
    """A Slurm job array an earlier launch submitted that is still queued or running (``squeue`` says)
    holds the artifact: launching its tasks again would run them twice."""
    try:
        job = json.loads((plan.engine / "slurm.json").read_text(encoding="utf-8"))["job"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if shutil.which("squeue") is None:
        return
    found = subprocess.run(
        ["squeue", "-h", "-j", job, "-o", "%i"], capture_output=True, text=True, check=False
    )
    if found.returncode == 0 and found.stdout.strip():
        raise PipelineError(
            f"Slurm job {job} of a keytokens run is still queued or running on {plan.root} (squeue -j "
            f"{job}): wait for it to finish, or cancel it (scancel {job}), then run this again"
        )


def earlier_failures(plan: Plan) -> None:
    """A warning for each task that failed in the run before this one (run again now)."""
    for path in sorted((plan.engine / "errors").glob("*.json")):
        error = task_error(plan.engine, int(path.stem))
        print(f"warning: task {int(path.stem)} failed before ({error}): it runs again", file=sys.stderr)


def give_up(plan: Plan) -> None:
    """After a failure: with no document finished (or a finished artifact checked), nothing is left
    behind but what was there; otherwise the parts and the engine's folder stay for the rerun."""
    writer = ArtifactWriter(plan.root, {}, "")
    if plan.finished or not writer.finished():
        shutil.rmtree(plan.engine, ignore_errors=True)
    if not plan.finished:
        writer.discard_if_empty()


def finalize(launch: Launch, resumed: int, started: float) -> dict[str, Any]:
    """The parts merged into the artifact with the settings the tasks recorded, and the manifest's
    records beside them: documents, skipped ones, libraries, how the run ran, a LooGLE corpus's
    questions."""
    plan = launch.plan
    tasks = [
        json.loads(p.read_text(encoding="utf-8")) for p in sorted((plan.engine / "tasks").glob("*.json"))
    ]
    devices = [task["placement"] for task in tasks]
    extra: dict[str, Any] = {
        "documents": document_records(plan.prepared),
        "skipped": plan.skipped,
        "libraries": library_versions(),
        "run": {
            "device": devices[0] if devices else None,
            "devices": devices,  # each task's that ran, with indices
            **launch.run,
            "wall_seconds": round(time.time() - started, 1),
            "task_seconds": round(sum(task["seconds"] for task in tasks), 1),
            "resumed_documents": resumed,
        },
    }
    qa = None
    if plan.questions is not None:
        qa = plan.questions.tables([p.doc.id for p in plan.prepared])
        extra["questions"] = question_record(plan.questions, qa, plan.prepared, plan.tokens.tokenizer)
    writer = settled(ArtifactWriter.resumed(plan.root), tasks)
    return writer.finalize(range(len(plan.prepared)), extra, qa, launch.shard_rows)


def settled(writer: ArtifactWriter, tasks: list[dict[str, Any]]) -> ArtifactWriter:
    """The writer with the evaluator's record its tasks settled (its weights' hashes, waited for by each
    task after its texts: ``pipeline.keytokens.step``) in the settings and fingerprint the manifest
    records, where the run recorded it by its files' versions until then; tasks that found other
    weights stop the run here, before the manifest."""
    found = {json.dumps(task["evaluator"], sort_keys=True) for task in tasks if "evaluator" in task}
    if len(found) > 1:
        raise PipelineError(
            f"the tasks of {writer.root} loaded evaluators with different weights: nothing is recorded; "
            "delete that directory and run again with one checkpoint"
        )
    if found and (evaluator := json.loads(found.pop())) != writer.settings.get("evaluator"):
        writer.settings = {**writer.settings, "evaluator": evaluator}
        writer.fingerprint = settings_fingerprint(writer.settings)
    return writer


def question_record(questions: LoogleCorpus, qa: dict, prepared: list[Prepared], tokenizer: Any) -> dict:
    """The manifest's ``questions`` record: where they came from, and what the cut keeps of each
    document and its evidence (a truncated text's source tokenized whole, as stage 1 first does)."""
    documents = [
        {
            "doc_id": p.doc.id,
            "n_tokens": len(p.ids),
            "n_source_tokens": len(encode_with_offsets(tokenizer, p.doc.text).ids)
            if p.truncated
            else len(p.ids),
            "n_chars": len(p.text),
            "n_source_chars": len(p.doc.text),
        }
        for p in prepared
    ]
    return {**questions.record, "documents": kept_records(qa, documents)}
