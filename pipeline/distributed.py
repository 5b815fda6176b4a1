"""Data parallelism for stage 1: ranks from ``torchrun``, deterministic document assignment, barriers.

With ``torchrun --nproc_per_node=N`` every rank scores its own documents and writes its own parts;
rank 0 writes the tables and the manifest once every rank has finished. Without torchrun there is
one rank and nothing here does anything.
"""

from __future__ import annotations

import heapq
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()


def init_ranks(use_cuda: bool) -> Ranks:
    """Join the process group that torchrun describes (gloo on CPU, NCCL on GPUs), if any."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Ranks()

    if not dist.is_initialized():
        # Stage 1 on a large evaluator runs for hours: ranks may wait long for each other at the end.
        dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timedelta(hours=48))
    return Ranks(
        rank=dist.get_rank(), world=dist.get_world_size(), local_rank=int(os.environ.get("LOCAL_RANK", "0"))
    )


def local_gpus(ranks: Ranks) -> list[int]:
    """This rank's slice of the node's GPUs: with 8 GPUs and 2 ranks per node, rank 1 gets 4-7."""
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    count = torch.cuda.device_count()
    share = max(1, count // per_node)
    return list(range(ranks.local_rank * share, min((ranks.local_rank + 1) * share, count)))


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
