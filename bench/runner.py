"""The benchmarks' one runner. A case, ``bench/<name>.py`` (``make bench-<name>``), declares a ``CASE``:
its contenders, its sizes, and how one contender runs at one size: a command line, or a ``setup`` that
readies it in a child process and returns the work to time. ``run`` measures every (contender, size)
in its own watched process and returns one row each; the case renders them (``bench.report``). One
clock measures everything (``Clock``): wall and CPU seconds of a block and the peak of a memory reading
during it: in a child, of the work (resident memory, or torch's allocation on a CUDA device, between
two synchronisations); around a child, of its process (its tree's resident memory or the GPU's by
NVML, a memory cap and a time limit). ``machine`` and ``stamp`` record where, which commit and when."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.shared import ROOT, slug

CHILD, RECORD = "--child", "bench-record: "  # a child's argument; the prefix of each record it prints

Reader = Callable[[], int]
Work = Callable[[], Any]  # what setup returns: the work timed; a dict it returns is kept in the row


@dataclass
class Clock:
    """Wall seconds (``seconds``; ``began`` and ``ended`` since the epoch), CPU seconds (``cpu_s``, of
    ``cpu()``) and peak memory (``start`` and ``peak`` bytes of ``memory()``, sampled every ``interval``
    seconds in a thread) of a block, between two calls of ``sync`` (a device synchronisation).
    ``cuda``: the memory is torch's allocation on the CUDA device (its peak counter, reset on entry)."""

    memory: Reader | None = None
    cpu: Callable[[], float] | None = None
    sync: Callable[[], None] | None = None
    interval: float = 0.01
    cuda: bool = False
    start: int = 0
    peak: int = 0
    seconds: float = 0.0
    began: float = 0.0
    ended: float = 0.0
    cpu_s: float | None = None

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self.memory())

    def __enter__(self) -> Clock:
        if self.sync:
            self.sync()
        if self.cuda:
            import torch

            torch.cuda.reset_peak_memory_stats()
            self.start = self.peak = torch.cuda.memory_allocated()
        elif self.memory:
            self.start = self.peak = self.memory()
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        self._cpu0 = self.cpu() if self.cpu else 0.0
        self.began, self._wall0 = time.time(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        if self.sync:
            self.sync()
        self.seconds, self.ended = time.perf_counter() - self._wall0, time.time()
        if self.cpu:
            self.cpu_s = self.cpu() - self._cpu0
        if self.cuda:
            import torch

            self.peak = torch.cuda.max_memory_allocated()
        elif self.memory:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, self.memory())

    def record(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "cpu_s": self.cpu_s,
            "start_bytes": self.start,
            "peak_bytes": self.peak,
        }


def own_cpu() -> float:
    """CPU seconds (user and system, every thread) of this process so far."""
    return sum(resource.getrusage(resource.RUSAGE_SELF)[:2])


def rss_reader(pid: int | None = None, tree: bool = True) -> Reader:
    """Resident bytes of process ``pid`` (default: this one) and, with ``tree``, its children; 0 once
    it has exited."""
    import psutil

    def read() -> int:
        try:
            root = psutil.Process(pid)
            processes = [root, *root.children(recursive=True)] if tree else [root]
            return sum(p.memory_info().rss for p in processes)
        except psutil.Error:
            return 0

    return read


def nvml_reader(index: int = 0) -> Reader | None:
    """Bytes in use on GPU ``index`` as NVML reports them, or None where NVML is not there."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # no library, no driver or no GPU: the caller falls back to resident memory
        return None
    return lambda: int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)


def cuda_started() -> bool:
    """Whether torch has started a CUDA device in this process (no import, no start otherwise)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()


def cuda_sync() -> None:
    if cuda_started():
        sys.modules["torch"].cuda.synchronize()


def clock(interval: float = 0.01) -> Clock:
    """The clock of work in this process: on a started CUDA device, its allocation peak between two
    synchronisations; else the resident memory, after giving freed heap back to the system."""
    if cuda_started():
        return Clock(cpu=own_cpu, sync=cuda_sync, cuda=True)
    gc.collect()
    with contextlib.suppress(OSError):  # glibc: give freed heap back, so that the peak shows
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return Clock(rss_reader(tree=False), cpu=own_cpu, interval=interval)


def process_started() -> float:
    """When this process started (seconds since the epoch)."""
    import psutil

    return psutil.Process().create_time()


def summary(records: list[dict]) -> dict[str, Any]:
    """Repeated measurements of one thing (``Clock.record()``s, or summaries): the median seconds and
    CPU seconds, the first start, the largest peak and peak above its start, each run's (seconds, CPU)."""
    cpu = [r["cpu_s"] for r in records if r["cpu_s"] is not None]
    return {
        "seconds": statistics.median(r["seconds"] for r in records),
        "cpu_s": statistics.median(cpu) if cpu else None,
        "start_bytes": records[0]["start_bytes"],
        "peak_bytes": max(r["peak_bytes"] for r in records),
        "above_start_bytes": max(r["peak_bytes"] - r["start_bytes"] for r in records),
        "runs": [[r["seconds"], r["cpu_s"]] for r in records],
    }


class Skip(Exception):
    """Raised by a setup for a contender that cannot run here: its row says why, as ``skipped``."""


@dataclass(frozen=True)
class Case:
    """A benchmark: its contenders and sizes, and how one contender runs at one size: ``command(contender,
    size, **options)`` gives its command line (or (command line, environment)); without ``command``, or
    where it gives None, ``setup(contender, size, **options)`` in a child process returns the work to
    time (a callable; a dict it returns is kept in the row)."""

    name: str  # bench/<name>.py, make bench-<name with - for _>
    contenders: tuple[str, ...]
    sizes: tuple[Any, ...] = (None,)
    setup: Callable[..., Work] | None = None
    command: Callable[..., list[str] | tuple[list[str], dict[str, str]]] | None = None
    together: bool = False  # every contender of a size in one process (what they load is shared)
    interval: float = 0.01  # seconds between memory samples in the child
    device_memory: bool = False  # a process's peak is the GPU's by NVML where there is one


def run(
    case: Case,
    *,
    contenders: Sequence[str] | None = None,
    sizes: Sequence[Any] | None = None,
    options: dict[str, Any] | None = None,
    repeats: int = 1,
    cap_gb: float | None = None,
    timeout: float | None = None,
    budget: float | None = None,
    logs: Path | None = None,
    cache: Path | None = None,
    parallel: int = 1,
    strict: bool = False,
) -> list[dict]:
    """One row per (contender, size), each measured in its own process (one per size, ``together``):
    ``{"contender", "size", facts..., "work": summary, "process": summary}``, or ``failed`` (an error,
    past ``cap_gb`` or ``timeout`` seconds) or ``skipped`` (``Skip``, or past ``budget`` seconds in all).
    ``repeats``: times the work is timed (a command: run); ``logs``: the processes' output kept there;
    ``cache``: rows measured before, read back; ``parallel``: processes at once; ``strict``: a failure
    stops the bench."""
    names, options = list(contenders or case.contenders), options or {}
    groups = [names] if case.together else [[c] for c in names]
    deadline = None if budget is None else time.monotonic() + budget

    def one(size: Any, group: list[str]) -> list[dict]:
        job = {"case": case.name, "contenders": group, "size": size, "options": options, "repeats": repeats}
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left < 20:
            found = [
                {"contender": c, "size": size, "skipped": f"out of time ({budget:.0f} s budget)"}
                for c in group
            ]
        else:
            limit = timeout if left is None else min(left, timeout or left)
            found = cached(cache, {**job, "cap_gb": cap_gb}, partial(measure, case, job, cap_gb, limit, logs))
        for row in found:
            outcome = row.get("failed") or row.get("skipped") or "done"
            print(f"{case.name} {row['contender']} {size}: {outcome}", file=sys.stderr, flush=True)
            if strict and "failed" in row:
                raise SystemExit(f"{case.name} {row['contender']} at {size} failed: {row['failed']}")
        return found

    jobs = [(size, group) for size in (sizes or case.sizes) for group in groups]
    with ThreadPoolExecutor(parallel) as pool:
        return [row for found in pool.map(lambda job: one(*job), jobs) for row in found]


def measure(
    case: Case, job: dict, cap_gb: float | None, timeout: float | None, logs: Path | None
) -> list[dict]:
    """The rows of one process: a setup's child, or a contender's command run ``repeats`` times."""
    group, size = job["contenders"], job["size"]
    log = None if logs is None else logs / f"{slug(' '.join(group))}-{slug(str(size))}.log"
    command = case.command(group[0], size, **job["options"]) if case.command else None
    if command is None:
        argv = [sys.executable, "-m", f"bench.{case.name}", CHILD, json.dumps(job)]
        process, records = run_process(argv, cap_gb=cap_gb, timeout=timeout, log=log, nvml=case.device_memory)
        found = {r["contender"]: r for r in records}
        lost = {"size": size, "failed": process.get("failed") or "no record"}
        return [{"contender": c, **found.get(c, lost), "process": process} for c in group]
    argv, env = command if isinstance(command, tuple) else (command, {})
    runs = [run_process(argv, cap_gb=cap_gb, timeout=timeout, log=log, env=env, nvml=case.device_memory)[0]
            for _ in range(job["repeats"])]  # fmt: skip
    row = {"contender": group[0], "size": size, "process": runs[-1]}
    failed = next((r["failed"] for r in runs if "failed" in r), None)
    return [row | ({"failed": failed} if failed else {"work": summary(runs)})]


def cached(cache: Path | None, key: dict, measured: Callable[[], list[dict]]) -> list[dict]:
    """The rows stored under ``key`` in ``cache`` (JSON Lines), else ``measured()``, stored."""
    text = json.dumps(key, sort_keys=True)
    if cache is not None and cache.is_file():
        for line in cache.read_text().splitlines():
            entry = json.loads(line)
            if entry["key"] == text:
                return [{**row, "cached": True} for row in entry["rows"]]
    rows = measured()
    if cache is not None and not any("failed" in r for r in rows):
        cache.parent.mkdir(parents=True, exist_ok=True)
        with cache.open("a") as handle:
            handle.write(json.dumps({"key": text, "rows": rows}) + "\n")
    return rows


def run_process(
    argv: list[str],
    *,
    cap_gb: float | None = None,
    timeout: float | None = None,
    log: Path | None = None,
    env: dict[str, str] | None = None,
    nvml: bool = False,
) -> tuple[dict, list[dict]]:
    """Run ``argv`` from the repository root, its output to ``log`` (or a temporary file), watched by a
    ``Clock`` of the resident memory of its process tree (or with ``nvml`` the GPU's memory in use,
    from before it started, where NVML answers); killed past ``cap_gb`` or ``timeout`` seconds. Returns
    its summary (``failed`` if it did not end well) and the records it printed (``RECORD`` lines)."""
    with log.open("w+") if log else tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(
            argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        device = nvml_reader() if nvml else None
        with Clock(device or rss_reader(proc.pid), interval=0.05) as watched:
            status, usage, killed = wait(proc, watched, cap_gb, timeout)
        out.seek(0)
        lines = out.read().splitlines()
    result = {**summary([watched.record()]), "cpu_s": sum(usage[:2]), "returncode": status}
    result["memory"] = "nvml: the GPU's memory in use" if device else "resident memory of the process tree"
    last = ([line for line in lines if line.strip()] or ["no output"])[-1][:300]
    if killed or status:  # a signal: the kernel's OOM killer acts before the watchdog's next look
        result["failed"] = killed or (
            f"killed by signal {-status} (out of memory)" if status < 0 else f"error: {last}"
        )
    records = [json.loads(line.removeprefix(RECORD)) for line in lines if line.startswith(RECORD)]
    return result, records


def start(argv: list[str]) -> subprocess.Popen:
    """A process a contender's own command drives (bench.curate's kill and resume runs a command, kills
    one of its tasks, and runs it again), from the repository root, its error stream kept as text; the
    runner measures it as part of the contender's process tree."""
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait(proc: subprocess.Popen, watched: Clock, cap_gb: float | None, timeout: float | None) -> tuple:
    """Wait for ``proc`` (its exit status and resource usage); kill it past ``cap_gb`` or ``timeout``."""
    killed, started = None, time.perf_counter()
    while not (reaped := os.wait4(proc.pid, os.WNOHANG))[0]:
        if cap_gb is not None and watched.peak > cap_gb * 1e9:
            killed = killed or f"exceeded the {cap_gb:g} GB memory cap"
        elif timeout is not None and time.perf_counter() - started > timeout:
            killed = killed or f"timed out ({timeout:.0f} s)"
        if killed:
            proc.kill()
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(reaped[1])
    return proc.returncode, reaped[2], killed


def child(case: Case) -> bool:
    """The child side of ``run``: with ``--child '<job>'`` as the arguments, set up each contender of the
    job in turn, time its work with ``clock`` (``repeats`` times) and print its record; returns True.
    Otherwise False (the parent goes on)."""
    if len(sys.argv) != 3 or sys.argv[1] != CHILD:
        return False
    job = json.loads(sys.argv[2])
    for contender in job["contenders"]:
        row: dict[str, Any] = {"contender": contender, "size": job["size"]}
        try:
            work = case.setup(contender, job["size"], **job["options"])
            clocks, facts = [], {}
            for _ in range(job["repeats"]):
                with clock(case.interval) as c:
                    out = work()
                clocks.append(c.record())
                facts = out if isinstance(out, dict) else {}
            row |= {**facts, "work": summary(clocks)}
        except Skip as why:
            row["skipped"] = str(why)
        except Exception as exc:  # one contender's failure is a result; the others go on
            traceback.print_exc()
            row["failed"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        print(RECORD + json.dumps(row), flush=True)
    return True


def machine() -> dict:
    """The machine, library versions, commit and date of a measurement (a GPU's name, memory, CUDA
    and driver too)."""
    import torch
    import transformers

    record = {"python": platform.python_version(), "torch": torch.__version__,
              "transformers": transformers.__version__, "cpus": os.cpu_count(), "commit": commit(),
              "date": time.strftime("%Y-%m-%d")}  # fmt: skip
    if torch.cuda.is_available():
        record["gpu"] = torch.cuda.get_device_name(0)
        record["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        record["cuda"] = torch.version.cuda
        with contextlib.suppress(Exception):
            import pynvml

            pynvml.nvmlInit()
            record["driver"] = pynvml.nvmlSystemGetDriverVersion()
    record["longppl"] = next((d.version for d in metadata.distributions(name="longppl")), None)
    return record


def commit() -> str | None:
    """The commit measured: ``BENCH_COMMIT`` where set (a copy without git), else git's HEAD."""
    git = ["git", "rev-parse", "--short", "HEAD"]
    try:
        return (
            os.environ.get("BENCH_COMMIT")
            or subprocess.run(git, cwd=ROOT, capture_output=True, text=True).stdout.strip()
            or None
        )
    except OSError:
        return None


def stamp() -> str:
    """The machine in words (``pipeline.provenance.machine``), the commit and the date, for a page."""
    from pipeline.provenance import machine as in_words

    return f"{in_words()}; commit {commit()}, {time.strftime('%Y-%m-%d')}"
