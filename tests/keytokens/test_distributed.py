"""Stage 1 across processes (torchrun, gloo, CPU) and after crashes: the same tables as one clean run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import pyarrow.parquet as pq
import pytest

from pipeline.errors import PipelineError
from pipeline.keytokens import ranks as distributed
from pipeline.keytokens.ranks import assign, local_gpus, rank_gpus
from tests.support import DISTRIBUTED_WORDS as WORDS
from tests.support import (
    ROOT,
    compose_keytokens,
    keytokens_command,
    keytokens_overrides,
    run_cmd,
    run_keytokens,
)
from tests.support import table_bytes as tables


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    import random

    rng = random.Random(0)
    path = tmp_path_factory.mktemp("dist") / "corpus.jsonl"
    rows = [
        {"id": f"d{i}", "text": " ".join(rng.choice(WORDS) for _ in range(60 + 25 * i))} for i in range(8)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def reference(tiny_model_dir, corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    done = run_cmd(keytokens_command(tiny_model_dir, corpus, out))
    assert done.returncode == 0, done.stderr[-2000:]
    return tables(out / "test")


def test_assignment_is_balanced_and_deterministic():
    lengths = [100, 90, 80, 70, 10, 10, 5]
    owners = assign(lengths, 2)
    assert owners == assign(lengths, 2)
    loads = [sum(n for n, o in zip(lengths, owners, strict=True) if o == r) for r in range(2)]
    assert abs(loads[0] - loads[1]) <= 10 and assign(lengths, 1) == [0] * 7


def test_two_processes_give_the_same_tables(tiny_model_dir, corpus, tmp_path, reference):
    done = run_cmd(keytokens_command(tiny_model_dir, corpus, tmp_path, nproc=2))
    assert done.returncode == 0, done.stderr[-3000:]
    assert tables(tmp_path / "test") == reference
    manifest = json.loads((tmp_path / "test" / "manifest.json").read_text())
    assert manifest["run"]["processes"] == 2 and manifest["run"]["devices"] == ["cpu", "cpu"]


@pytest.mark.parametrize("kill_after_parts", [0, 1, 3, 7])
def test_killed_run_resumes_to_the_same_tables(tiny_model_dir, corpus, tmp_path, reference, kill_after_parts):
    cmd = keytokens_command(tiny_model_dir, corpus, tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    parts = tmp_path / "test" / "parts"
    deadline = time.time() + 900
    while proc.poll() is None and time.time() < deadline:
        state = tmp_path / "test" / "run.json"
        count = sum(1 for p in parts.iterdir() if p.name.isdigit()) if parts.is_dir() else -1
        if state.exists() and count >= kill_after_parts:
            os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.002)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (tmp_path / "test" / "manifest.json").exists()
    done = run_cmd(cmd)
    assert done.returncode == 0, done.stderr[-2000:]
    assert tables(tmp_path / "test") == reference
    assert pq.read_table(tmp_path / "test" / "documents.parquet").num_rows == 8


def test_in_process_run_matches_the_subprocess(tiny_model_dir, corpus, tmp_path, reference):
    run_keytokens(compose_keytokens(keytokens_overrides(tiny_model_dir, corpus, tmp_path, "max_tokens=400")))
    assert tables(tmp_path / "test") == reference


def test_each_rank_gets_its_own_slice_of_gpus():
    assert [local_gpus(r, 2, 8) for r in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [local_gpus(r, 8, 8) for r in range(8)] == [[r] for r in range(8)]
    assert [local_gpus(r, 3, 8) for r in range(3)] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(PipelineError, match=r"3 processes per node .* but 2 GPU"):
        local_gpus(2, 3, 2)


TASK = {"SLURM_LOCALID": "{r}"}  # a Slurm task's local id
SRUN = {**TASK, "SLURM_NTASKS_PER_NODE": "4", "SLURM_GPUS_PER_TASK": "1"}
LAUNCHES = {  # name: (environment of local rank r, visible GPUs, GPUs of ranks 0..3)
    "srun --ntasks-per-node=4 --gpus-per-task=1": (SRUN, 1, [[0]] * 4),
    "srun, 4 tasks per node, one GPU bound to each": ({**TASK, "SLURM_NTASKS_PER_NODE": "4"}, 1, [[0]] * 4),
    "srun --gpus-per-task=1, LOCAL_RANK and LOCAL_WORLD_SIZE exported": (
        {**SRUN, "LOCAL_WORLD_SIZE": "4", "LOCAL_RANK": "{r}"},
        1,
        [[0]] * 4,
    ),
    "srun -n 4 --gpus-per-task=2 (no tasks per node)": (
        {**TASK, "SLURM_GPUS_PER_TASK": "2"},
        2,
        [[0, 1]] * 4,
    ),
    "srun, 4 tasks per node seeing all 8 GPUs": (
        {**TASK, "SLURM_NTASKS_PER_NODE": "4"},
        8,
        [[0, 1], [2, 3], [4, 5], [6, 7]],
    ),
    "torchrun --nproc_per_node=4 on 8 GPUs": (
        {"LOCAL_RANK": "{r}", "LOCAL_WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "x"},
        8,
        [[0, 1], [2, 3], [4, 5], [6, 7]],
    ),
    "no LOCAL_WORLD_SIZE, 8 GPUs: one per rank": ({"LOCAL_RANK": "{r}"}, 8, [[0], [1], [2], [3]]),
    "no LOCAL_WORLD_SIZE, one GPU visible": ({"LOCAL_RANK": "{r}"}, 1, [[0]] * 4),
}


@pytest.mark.parametrize("launch", list(LAUNCHES))
def test_each_launcher_gives_each_rank_gpus_it_can_see(launch):
    """srun's per-task GPUs (one visible GPU per task: cuda:0 for every rank), srun or torchrun over a
    whole node (equal slices), and no LOCAL_WORLD_SIZE (one GPU per rank, never one that is not visible)."""
    env, count, want = LAUNCHES[launch]
    for r in range(4):
        gpus = rank_gpus({k: v.format(r=r) for k, v in env.items()}, count)
        assert gpus == want[r] and all(0 <= g < count for g in gpus)


def test_torchrun_with_more_processes_than_gpus_is_an_error_inside_slurm_too():
    env = {"LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "x", "SLURM_LOCALID": "0"}
    with pytest.raises(PipelineError, match="NPROC<=2"):
        rank_gpus(env, 2)
    with pytest.raises(PipelineError, match="no CUDA GPU is visible"):
        rank_gpus({"LOCAL_RANK": "0"}, 0)


def test_a_slurm_task_with_one_gpu_binds_cuda_0(monkeypatch):
    """srun --ntasks-per-node=4 --gpus-per-task=1, task 3, RANK and WORLD_SIZE exported by hand: the
    process sees one GPU, which is its own."""
    calls = []
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"WORLD_SIZE": "4", **SRUN, "SLURM_LOCALID": "3"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(distributed.torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(distributed.torch.cuda, "set_device", lambda d: calls.append(d))
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda backend, **kw: calls.append(backend))
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: 3)
    monkeypatch.setattr(distributed.dist, "get_world_size", lambda: 4)
    ranks = distributed.init_ranks(use_cuda=True)
    assert calls == [distributed.torch.device("cuda", 0), "nccl"]
    assert ranks.gpus == (0,) and ranks.local_rank == 3


def test_ranks_are_bound_to_their_gpu_before_the_process_group(monkeypatch):
    """Rank 1 of 2 on a 4-GPU node: set_device(cuda:2), then NCCL with device_id=cuda:2."""
    calls = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(distributed.torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(distributed.torch.cuda, "set_device", lambda d: calls.append(("set_device", d)))
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(
        distributed.dist, "init_process_group", lambda backend, **kw: calls.append((backend, kw["device_id"]))
    )
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: 1)
    monkeypatch.setattr(distributed.dist, "get_world_size", lambda: 2)
    ranks = distributed.init_ranks(use_cuda=True)
    cuda2 = distributed.torch.device("cuda", 2)
    assert calls == [("set_device", cuda2), ("nccl", cuda2)] and ranks.gpus == (2, 3)


def test_more_processes_than_gpus_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setattr(distributed.torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda *a, **k: pytest.fail("group started"))
    with pytest.raises(PipelineError, match="NPROC<=2"):
        distributed.init_ranks(use_cuda=True)


def holder_pid(lock, procs, deadline: float) -> int:
    """The pid recorded in the lock file once one of ``procs`` holds the lock."""
    while time.time() < deadline:
        try:
            pid = json.loads(lock.read_text())["pid"]
            if pid in {p.pid for p in procs}:
                return pid
        except (OSError, ValueError, KeyError):
            pass
        assert all(p.poll() is None for p in procs), "a run ended before either held the lock"
        time.sleep(0.01)
    raise AssertionError("no run took the lock")


def test_two_runs_on_one_artifact_and_a_killed_holder(tiny_model_dir, corpus, tmp_path, reference):
    """Two stage-1 processes started together on one artifact: one finishes, the other stops at once
    naming the holder. The holder is paused (SIGSTOP) while the other tries, so that it cannot finish
    before the other has even started. Then a run killed while it holds the lock (SIGKILL): the next
    run takes the lock and ends with the same tables."""
    cmd = keytokens_command(tiny_model_dir, corpus, tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    lock = tmp_path / ".test.lock"
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    pid = holder_pid(lock, procs, time.time() + 900)
    holder, other = sorted(procs, key=lambda p: p.pid != pid)
    os.kill(pid, signal.SIGSTOP)
    try:
        _, refused = other.communicate(timeout=900)
    finally:
        os.kill(pid, signal.SIGCONT)
    _, finished = holder.communicate(timeout=900)
    assert holder.returncode == 0, finished[-2000:]
    assert other.returncode == 2 and "Traceback" not in refused
    assert refused.startswith(f"error: another keytokens run is writing {tmp_path / 'test'}: pid {pid} on ")
    assert refused.count("\n") == 1
    assert tables(tmp_path / "test") == reference

    shutil.rmtree(tmp_path / "test")
    killed = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    parts = tmp_path / "test" / "parts"
    deadline = time.time() + 900
    while killed.poll() is None and time.time() < deadline:
        if parts.is_dir() and any(p.name.isdigit() for p in parts.iterdir()):
            os.kill(killed.pid, signal.SIGKILL)
            break
        time.sleep(0.002)
    killed.wait()
    assert killed.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert json.loads(lock.read_text())["pid"] == killed.pid  # its record stays; the kernel lock does not
    done = run_cmd(cmd)
    assert done.returncode == 0, done.stderr[-2000:]
    assert tables(tmp_path / "test") == reference


class CountingRanks(distributed.Ranks):
    """Two ranks without a process group: barriers are counted."""

    def barrier(self) -> None:
        BARRIERS.append(self.rank)


BARRIERS: list[int] = []


@pytest.mark.parametrize(
    ("spec", "waits"), [("/models/llama", False), ("smollm2-135m", True), ("m.gguf", True)]
)
def test_ranks_wait_for_rank_0_only_for_a_gguf_evaluator(spec, waits):
    """A checkpoint loads on every rank at once; a GGUF file (its one-time conversion into the cache)
    on rank 0 first, the other ranks once it is done: one barrier each, met by all (the keytokens job
    loads its evaluator in ``rank_zero_first(ranks, is_gguf(spec))``)."""
    from pipeline.keytokens.ranks import rank_zero_first
    from pipeline.models.sources import is_gguf

    BARRIERS.clear()
    loaded = []
    for rank in (0, 1):
        with rank_zero_first(CountingRanks(rank=rank, world=2), is_gguf(spec)):
            loaded.append((rank, len(BARRIERS)))
    assert ([0, 1] if waits else []) == BARRIERS
    assert loaded == ([(0, 0), (1, 2)] if waits else [(0, 0), (1, 0)])  # rank 1 after both barriers
