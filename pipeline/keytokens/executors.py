"""Where stage 1's tasks run: datatrove's executors, which own the tasks' ranks, their completion markers
(``<artifact>/.datatrove/completions/``) and the restart of failed ones (a rerun runs only the tasks
not marked complete). ``executor=`` chooses one (``Engine``, the settings; checked before any model
loads):

- ``local``: ``LocalPipelineExecutor`` on this machine, ``workers`` tasks at once (one: in this
  process). Each task runs in a process of its own (``LocalTasks``), so that a worker killed by a signal
  or the kernel's out-of-memory killer is one failed task, not a pool that waits for it for ever (as
  datatrove's does), and the other tasks go on. Each worker holds its share of the GPUs.
- ``slurm``: ``SlurmPipelineExecutor`` writes an sbatch job array (one task per array job, at most
  ``workers`` at once) and submits it; the command returns, and run again once the array is done it
  writes the artifact (and submits again the tasks that failed). Each job gets ``gpus_per_task`` GPUs.
- ``ray``: ``RayPipelineExecutor`` on the Ray cluster that ``ray.init`` finds (``RAY_ADDRESS``, or a
  local one), each task an actor with ``gpus_per_task`` GPUs; the launcher writes the artifact.

Datatrove's log lines go to each task's file (``.datatrove/logs/``), not to the terminal.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pydantic.dataclasses
import torch
from datatrove.executor import LocalPipelineExecutor, RayPipelineExecutor, SlurmPipelineExecutor
from datatrove.executor.base import PipelineExecutor
from datatrove.utils.stats import PipelineStats
from pydantic import Field

from pipeline.definition import Positive
from pipeline.errors import PipelineError
from pipeline.settings import NonNegative, Text

EXECUTORS = ("local", "slurm", "ray")


@pydantic.dataclasses.dataclass(frozen=True)
class SlurmOptions:
    """What an sbatch array job needs (``slurm.<key>=``); None: the cluster's default."""

    partition: Text | None = None
    time: Text = "24:00:00"  # each task's time limit
    cpus_per_task: Positive = 4
    mem_per_cpu_gb: Positive = 8
    qos: Text | None = None
    job_name: Text = "longppl-keytokens"
    # How the array job's script activates this Python; None: `source <this venv>/bin/activate`.
    env_command: Text | None = None
    sbatch_args: dict[str, Text] = Field(default_factory=dict)  # more #SBATCH lines: {account: ...}
    max_array_size: Positive = 1001  # the cluster's MaxArraySize


@pydantic.dataclasses.dataclass(frozen=True)
class RayOptions:
    """What each Ray task reserves (``ray.<key>=``)."""

    cpus_per_task: Positive = 1
    mem_per_cpu_gb: float = Field(default=2.0, gt=0)


ENGINE_GROUPS = {"slurm": SlurmOptions, "ray": RayOptions}  # its groups of settings, parsed as groups


@pydantic.dataclasses.dataclass(frozen=True)
class Engine:
    """How stage 1's tasks run: ``tasks`` shards of the corpus (balanced by tokens), ``workers`` at once
    (None: one on the local executor, every task at once on Slurm and Ray), each holding
    ``gpus_per_task`` GPUs (None: on the local executor each worker its share of the visible GPUs when
    the evaluator runs on CUDA; on Slurm and Ray one on CUDA, none with ``device=cpu``). None of it
    changes a number: the fingerprint leaves it out, the manifest's ``run`` records it."""

    executor: Literal[EXECUTORS] = "local"
    tasks: Positive = 1
    workers: Positive | None = None
    gpus_per_task: NonNegative | None = None
    slurm: SlurmOptions = Field(default_factory=SlurmOptions)
    ray: RayOptions = Field(default_factory=RayOptions)

    def at_once(self) -> int:
        """How many tasks run at once (the local executor's processes, datatrove's ``workers``)."""
        if self.workers is not None:
            return self.workers
        return 1 if self.executor == "local" else self.tasks

    def record(self, gpus: int) -> dict[str, Any]:
        """What the manifest's ``run`` records of it (``gpus``: each task's GPUs, resolved)."""
        return {
            "executor": self.executor,
            "tasks": self.tasks,
            "workers": self.at_once(),
            "gpus_per_task": gpus,
        }

    def check(self, device: str) -> int:
        """Each task's GPUs on ``device``; a setting that cannot run here is one PipelineError, before
        any model loads."""
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise PipelineError(
                "make keytokens runs its own tasks: start it once, not under torchrun or srun with "
                "WORLD_SIZE set; on this machine pass workers=N tasks=N, on a cluster executor=slurm or ray"
            )
        if self.workers is not None and self.workers > self.tasks:
            raise PipelineError(
                f"setting workers={self.workers} is more than tasks={self.tasks}: a worker would have no "
                f"task; pass workers<={self.tasks}, or tasks>={self.workers}"
            )
        gpus = self.gpus(device)
        if self.executor == "slurm" and shutil.which("sbatch") is None:
            raise PipelineError(
                "executor=slurm needs Slurm's sbatch on the PATH, and there is none: run this on a Slurm "
                "login node, or pass executor=local"
            )
        if self.executor == "ray" and importlib.util.find_spec("ray") is None:
            raise PipelineError(
                "executor=ray needs Ray, which is not installed: pip install 'longppl-pipeline[ray]' (in a "
                "checkout: make setup-ray)"
            )
        return gpus

    def datatrove(self, steps: list, folder: Path, gpus: int) -> PipelineExecutor:
        """Its datatrove executor of ``steps``, its logs, stats and completion markers in ``folder``."""
        common = {"pipeline": steps, "tasks": self.tasks, "logging_dir": str(folder)}
        if self.executor == "local":
            return LocalTasks(**common, workers=self.at_once())
        if self.executor == "ray":
            ray = self.ray
            return RayPipelineExecutor(
                **common, workers=self.at_once(), gpus_per_task=gpus, cpus_per_task=ray.cpus_per_task,
                mem_per_cpu_gb=ray.mem_per_cpu_gb,
            )  # fmt: skip
        slurm = self.slurm
        return SlurmTasks(
            **common, workers=self.workers or -1, gpus_per_task=gpus, time=slurm.time,
            partition=slurm.partition, cpus_per_task=slurm.cpus_per_task, mem_per_cpu_gb=slurm.mem_per_cpu_gb,
            qos=slurm.qos, job_name=slurm.job_name, env_command=slurm.env_command or activate_this_python(),
            sbatch_args=dict(slurm.sbatch_args), max_array_size=slurm.max_array_size,
            slurm_logs_folder=str(folder / "slurm_logs"),
        )  # fmt: skip

    def gpus(self, device: str) -> int:
        """Each task's GPUs (``gpus_per_task``, or its default), checked against the GPUs this
        machine sees for the local executor (a Slurm or Ray cluster's are its scheduler's to check)."""
        on_cpu = device == "cpu"
        if self.gpus_per_task and on_cpu:
            raise PipelineError(
                f"setting gpus_per_task={self.gpus_per_task} with device=cpu: the evaluator would not use "
                "them; pass gpus_per_task=0, or device=cuda"
            )
        if self.executor != "local":
            if self.gpus_per_task == 0 and device.startswith("cuda"):
                raise PipelineError(
                    f"setting gpus_per_task=0 with device={device}: pass gpus_per_task=1 or more"
                )
            return self.gpus_per_task if self.gpus_per_task is not None else int(not on_cpu)
        visible, workers = torch.cuda.device_count(), self.at_once()
        if self.gpus_per_task is None:
            cuda = device.startswith("cuda") or (device == "auto" and visible > 0)
            if cuda and workers > visible:
                raise too_few_gpus(f"{workers} workers on CUDA", workers, visible)
            return visible // workers if cuda else 0
        if self.gpus_per_task * workers > visible:
            raise too_few_gpus(f"gpus_per_task={self.gpus_per_task}", self.gpus_per_task * workers, visible)
        return self.gpus_per_task


def too_few_gpus(what: str, needed: int, visible: int) -> PipelineError:
    shown = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = f" (CUDA_VISIBLE_DEVICES={shown})" if shown is not None else ""
    return PipelineError(
        f"{what} needs {needed} GPU(s) for the tasks that run at once, and this machine shows {visible}"
        f"{where}: pass fewer workers, gpus_per_task=<fewer>, or executor=slurm or ray for a cluster"
    )


def activate_this_python() -> str:
    """The array job's command that runs this Python: its venv activated (or its folder first on the
    PATH), and this ``PYTHONPATH``."""
    bin_dir = Path(sys.executable).parent
    activate = bin_dir / "activate"
    command = f"source {activate}" if activate.is_file() else f'export PATH="{bin_dir}:$PATH"'
    path = os.environ.get("PYTHONPATH")
    return command + (f'\nexport PYTHONPATH="{path}"' if path else "")


class LocalTasks(LocalPipelineExecutor):
    """datatrove's local executor, each task in a process of its own (module docstring; one worker:
    every task in this process, one after the other, as datatrove runs them), told its worker's slot
    (its GPUs); a task that fails is left failed (the step records why) and the others go on."""

    def run(self) -> None:
        self._launched = True
        ranks = self.get_incomplete_ranks(
            range(self.local_rank_offset, self.local_rank_offset + self.local_tasks)
        )
        if not ranks:
            return
        self.save_executor_as_json()
        if self.workers == 1:
            pipeline = self.pipeline
            for rank in ranks:
                self.pipeline = copy.deepcopy(pipeline)
                self._run_for_rank(rank, 0)
            self.pipeline = pipeline
            return
        self.run_in_processes(ranks)

    def run_in_processes(self, ranks: list[int]) -> None:
        """Each task in a new process, ``workers`` at once, each worker slot handed to the next task."""
        import multiprocess
        from multiprocess.connection import wait

        context, free, running = multiprocess.get_context(self.start_method), list(range(self.workers)), {}
        try:
            while ranks or running:
                while ranks and free:
                    slot = free.pop(0)
                    process = context.Process(
                        target=self._run_for_rank, args=(ranks.pop(0), slot), daemon=True
                    )
                    process.start()
                    running[process.sentinel] = (process, slot)
                for sentinel in wait(list(running)):
                    process, slot = running.pop(sentinel)
                    process.join()
                    free.append(slot)
        finally:
            for process, _ in running.values():
                process.terminate()

    def _run_for_rank(self, rank: int, local_rank: int = 0, node_rank: int = -1) -> PipelineStats:
        for step in self.pipeline:
            if hasattr(step, "worker"):
                step.worker = local_rank
        with quiet_console():
            try:
                return super()._run_for_rank(rank, local_rank, node_rank)
            except Exception as exc:  # in errors/<task>.json and the task's log; the other tasks go on
                self.__dict__.setdefault("failures", {})[rank] = exc  # seen by the launcher when in-process
                return PipelineStats()


class SlurmTasks(SlurmPipelineExecutor):
    """datatrove's Slurm executor; no partition named: the cluster's default one."""

    def get_sbatch_args(self, max_array: int = 1) -> dict:
        args = super().get_sbatch_args(max_array)
        return {k: v for k, v in args.items() if not (k == "partition" and v is None)}


def record_task_error(engine: Path, task: int, exc: BaseException) -> None:
    """Why a task stopped, left in the engine's ``errors/<task>.json`` for the launcher (``task_error``)."""
    from pipeline.files import write_json_atomic
    from pipeline.models.loading import one_line

    record = {"error": one_line(exc, 2000), "type": type(exc).__name__, "pid": os.getpid()}
    write_json_atomic(engine / "errors" / f"{task:05d}.json", record)


def task_error(engine: Path, task: int) -> str | None:
    """Why a task stopped, as it left it in the engine's ``errors/<task>.json`` (None: no record)."""
    try:
        return json.loads((engine / "errors" / f"{task:05d}.json").read_text(encoding="utf-8"))["error"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def launch(executor: PipelineExecutor, gpus: int) -> None:
    """Run (local, Ray) or submit (Slurm) the tasks not marked complete; an sbatch that refuses them
    and a Ray cluster without the GPUs asked for (``gpus`` each) are one PipelineError each."""
    if isinstance(executor, RayPipelineExecutor):
        import ray

        if not ray.is_initialized():
            ray.init(log_to_driver=False)
        present = ray.cluster_resources().get("GPU", 0)
        if gpus > present:
            raise too_few_gpus(f"gpus_per_task={gpus} on the Ray cluster", gpus, int(present))
    try:
        with quiet_console():
            executor.run()
    except subprocess.CalledProcessError as exc:
        raise PipelineError(
            f"sbatch refused the job array (exit status {exc.returncode}; its message is above): check "
            "the slurm settings (slurm.partition=, slurm.time=, slurm.sbatch_args=...)"
        ) from None


@contextlib.contextmanager
def quiet_console() -> Iterator[None]:
    """Within the block, datatrove's log lines (loguru's messages) leave the terminal to the progress
    bars and the ``error:`` lines; each task's log file keeps them."""
    real = sys.stderr
    sys.stderr = WithoutLogLines(real)
    try:
        yield
    finally:
        sys.stderr = real


class WithoutLogLines:
    """A stream that passes on everything but loguru's messages (strings that carry their ``record``)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return len(text) if hasattr(text, "record") else self.stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)
