"""Data parallelism for the keytokens stage: ranks from ``torchrun`` (or Slurm's ``srun`` with the
process-group variables exported), GPU binding, deterministic document assignment, barriers.

With ``torchrun --nproc_per_node=N`` every rank scores its own documents and writes its own parts;
rank 0 writes the tables and the manifest once every rank has finished. Without torchrun there is
one rank and nothing here does anything.
"""

from __future__ import annotations

import contextlib
import heapq
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from pipeline.errors import PipelineError


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    gpus: tuple[int, ...] = ()  # this rank's GPUs (on CUDA with several ranks), the first one bound

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (a small picklable object), in rank order, on every rank."""
        if self.world <= 1:
            return [value]
        values: list[Any] = [None] * self.world
        dist.all_gather_object(values, value)
        return values


def is_main_process() -> bool:
    """Rank 0 of a torchrun job (its ``RANK``), or the only process."""
    return int(os.environ.get("RANK", "0")) == 0


def init_ranks(use_cuda: bool) -> Ranks:
    """Join the process group that torchrun describes (gloo on CPU, NCCL on GPUs), if any. On CUDA
    each rank is bound to the first GPU of its slice before the group starts, so that NCCL's
    context and every default allocation land there, not on GPU 0 or on another rank's GPUs."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Ranks()
    local_rank = int(_first(os.environ, "LOCAL_RANK", "SLURM_LOCALID") or 0)
    gpus: list[int] = []
    kwargs: dict[str, Any] = {}
    if use_cuda:
        gpus = rank_gpus(os.environ, torch.cuda.device_count())
        device = torch.device("cuda", gpus[0])
        torch.cuda.set_device(device)
        kwargs["device_id"] = device
    if not dist.is_initialized():
        # The keytokens stage on a large evaluator runs for hours: ranks may wait long for each other.
        dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timedelta(hours=48), **kwargs)
    return Ranks(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=local_rank, gpus=tuple(gpus))


def _first(env: Mapping[str, str], *names: str) -> str | None:
    return next((env[name] for name in names if env.get(name)), None)


def rank_gpus(env: Mapping[str, str], count: int) -> list[int]:
    """This rank's GPUs among the ``count`` it sees, from its launcher's environment.

    The local rank is ``LOCAL_RANK`` (torchrun) or ``SLURM_LOCALID`` (srun), the processes per node
    ``LOCAL_WORLD_SIZE`` or ``SLURM_NTASKS_PER_NODE``. A Slurm task (not under torchrun) that was given
    its own GPUs (``--gpus-per-task``: ``SLURM_GPUS_PER_TASK``, or fewer GPUs visible than tasks on
    the node) takes every GPU it sees; otherwise a rank takes its equal slice of the node's GPUs
    (``local_gpus``), one GPU per rank when the processes per node are not known."""
    local_rank = int(_first(env, "LOCAL_RANK", "SLURM_LOCALID") or 0)
    known = _first(env, "LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE")
    per_node = int(known) if known else None
    if count < 1:
        raise PipelineError("no CUDA GPU is visible to this process: use device=cpu")
    slurm_task = "SLURM_LOCALID" in env and "TORCHELASTIC_RUN_ID" not in env
    own = env.get("SLURM_GPUS_PER_TASK") or (per_node is not None and per_node > count)
    if slurm_task and own:
        return list(range(count))
    if per_node is None:
        if count == 1:
            return [0]
        per_node = count
    return local_gpus(local_rank, per_node, count)


def local_gpus(local_rank: int, per_node: int, count: int) -> list[int]:
    """A rank's equal slice of its node's ``count`` GPUs, with ``per_node`` ranks per node: with 8
    GPUs and 2 ranks, rank 1 gets 4-7 (GPUs left over by an uneven split stay unused)."""
    if per_node > count:
        raise PipelineError(
            f"{per_node} processes per node (NPROC) but {count} GPU(s) visible: each process needs at "
            f"least one GPU; use NPROC<={count}, or device=cpu"
        )
    if not 0 <= local_rank < per_node:
        raise PipelineError(
            f"local rank {local_rank} of {per_node} processes per node: set LOCAL_WORLD_SIZE (or "
            "SLURM_NTASKS_PER_NODE) to the number of processes on each node"
        )
    share = count // per_node
    return list(range(local_rank * share, (local_rank + 1) * share))


def shutdown(ranks: Ranks) -> None:
    if ranks.world > 1:
        dist.destroy_process_group()


def assign(lengths: list[int], world: int) -> list[int]:
    """A rank for each document, balanced by token count and deterministic: the longest documents
    first (ties by index), each to the rank with the fewest tokens so far (ties by rank)."""
    owners = [0] * len(lengths)
    loads = [(0, r) for r in range(world)]
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        load, rank = heapq.heappop(loads)
        owners[i] = rank
        heapq.heappush(loads, (load + lengths[i], rank))
    return owners


@contextlib.contextmanager
def rank_zero_first(ranks: Ranks, applies: bool = True) -> Iterator[None]:
    """The block on rank 0 first and on the other ranks once it is done (``applies``: the same on every
    rank, since they all meet the barrier): a one-time conversion into a shared cache is made once."""
    if applies and not ranks.is_main:
        ranks.barrier()
    yield
    if applies and ranks.is_main:
        ranks.barrier()
