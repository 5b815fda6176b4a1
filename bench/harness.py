"""The one harness of the benchmarks: a bench declares its contenders (each a dict of arguments to
its ``measure`` function, or a command) and one runner measures each in its own process, watched:
time, peak memory (resident memory of its process tree, or the device's by NVML), a memory cap and
a time limit. Also the in-process measures (``PeakMemory``, ``timed``), the record of the machine,
commit and date (``machine``, ``stamp``), the repository root and the default artifact.

A bench's module runs its own contenders: ``python -m bench.<name> --child '<json>'`` calls its
``measure(**json)`` and prints the record as the last line (``child`` in its ``main``; ``run`` in
the parent). The benchmarks run as modules from the repository root, as the Makefile does."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30
CHILD = "--child"
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the embedded models and local artifacts need no network


def slug(name: str) -> str:
    """A contender's or run's name as a file name: lower case, anything but letters and digits a '-'."""
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


def default_artifact() -> Path:
    """The artifact `make keytokens` writes by default (``default_artifact`` in conf/common.yaml)."""
    from pipeline.commands.shell import compose

    return ROOT / str(compose("score").artifact)


# ----------------------------------------------------------------------------------------------
# Peak memory: one sampler thread for every measure


class PeakSampler:
    """The largest value ``read()`` returns while the block runs, sampled every ``interval`` seconds
    in a thread; ``base`` is the first reading."""

    def __init__(self, read: Callable[[], int], interval: float = 0.1):
        self.read, self.interval = read, interval
        self.base = self.peak = read()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.read())
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.read())


def nvml_reader(index: int = 0) -> Callable[[], int] | None:
    """Bytes in use on GPU ``index`` as NVML reports them, or None where NVML is not there."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # no library, no driver or no GPU: the caller falls back to resident memory
        return None
    return lambda: int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)


def tree_rss_reader(pid: int, children: bool = True) -> Callable[[], int]:
    """Resident bytes of process ``pid`` and (``children``) its children; 0 once it has exited."""
    import psutil

    def read() -> int:
        try:
            root = psutil.Process(pid)
            tree = [root, *root.children(recursive=True)] if children else [root]
            return sum(p.memory_info().rss for p in tree)
        except psutil.Error:
            return 0

    return read


def rss() -> int:
    """This process's resident bytes now (e.g. a baseline: the model loaded)."""
    return tree_rss_reader(os.getpid(), children=False)()


class PeakMemory:
    """Peak memory during a block in this process: its resident memory, sampled every ``interval``
    seconds (``start``: the RSS on entry, after giving freed heap back to the system), or on a GPU
    the peak of ``torch.cuda.max_memory_allocated`` (``start``: the allocation on entry)."""

    def __init__(self, interval: float = 0.01, cuda: bool = False):
        self.interval, self.cuda = interval, cuda
        self.start = self.peak = 0

    def __enter__(self) -> PeakMemory:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.start = self.peak = torch.cuda.memory_allocated()
            return self
        with contextlib.suppress(OSError):  # glibc: give freed heap back, so that the peak shows
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        self._sampler = PeakSampler(tree_rss_reader(os.getpid(), children=False), self.interval).__enter__()
        self.start = self._sampler.base
        return self

    def __exit__(self, *exc) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated()
            return
        self._sampler.__exit__(*exc)
        self.peak = self._sampler.peak

    @property
    def above_start_gb(self) -> float:
        return (self.peak - self.start) / 2**30


def memory_record(baseline: int, peak: PeakMemory, start: float) -> dict[str, float]:
    """A measurement's memory in GB (``baseline``: bytes before it, e.g. the loaded model) and its
    seconds since ``start`` (``time.perf_counter``)."""
    return {
        "baseline_gb": baseline / 1e9,
        "peak_gb": peak.peak / 1e9,
        "above_model_gb": (peak.peak - baseline) / 1e9,
        "seconds": time.perf_counter() - start,
    }


def synced(work: Callable[[], Any], sync: Callable[[], None] | None = None) -> tuple[float, Any]:
    """(seconds, result) of ``work()`` between two calls of ``sync`` (e.g. ``torch.cuda.synchronize``)."""
    if sync:
        sync()
    start = time.perf_counter()
    out = work()
    if sync:
        sync()
    return time.perf_counter() - start, out


def timed(
    work: Callable[[], Any], repeats: int, sync: Callable[[], None] | None = None
) -> tuple[float, float]:
    """The median wall time and CPU time of ``work()`` over ``repeats`` calls, each ``synced`` (on a
    shared machine the CPU time is the steadier)."""
    wall, cpu = [], []
    for _ in range(repeats):
        c = time.process_time()
        wall.append(synced(work, sync)[0])
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu)


# ----------------------------------------------------------------------------------------------
# Each contender in its own process


def watch(proc: subprocess.Popen, read: Callable[[], int], cap_bytes: float | None, timeout: float | None,
          interval: float = 0.05) -> tuple[int, str | None]:  # fmt: skip
    """Sample ``read()`` every ``interval`` seconds until ``proc`` ends; kill it past ``cap_bytes`` or
    ``timeout`` seconds. Returns the peak and why it was killed (None: it ended by itself)."""
    peak, started, killed = 0, time.time(), None
    while proc.poll() is None:
        peak = max(peak, read())
        if cap_bytes is not None and peak > cap_bytes:
            killed = f"exceeded the {cap_bytes / 1e9:g} GB memory cap"
        elif timeout is not None and time.time() - started > timeout:
            killed = f"timed out ({timeout:.0f} s)"
        if killed:
            proc.kill()
            break
        time.sleep(interval)
    proc.wait()
    return peak, killed


def run_watched(cmd: list[str], cap_gb: float | None, timeout: float | None) -> dict:
    """Run ``cmd`` (which prints one JSON object as its last stdout line) in a subprocess whose
    resident memory, children included, is sampled every 50 ms; kill it past ``cap_gb`` or
    ``timeout`` seconds. Returns that object with ``process_peak_gb``, or ``failed`` and the peak."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT)
        cap = None if cap_gb is None else cap_gb * 1e9
        peak, killed = watch(proc, tree_rss_reader(proc.pid), cap, timeout)
        out.seek(0)
        err.seek(0)
        failed = killed or _failure(proc.returncode, err.read())
        if failed:
            return {"failed": failed, "process_peak_gb": peak / 1e9}
        return {**json.loads(out.read().strip().splitlines()[-1]), "process_peak_gb": peak / 1e9}


def _failure(returncode: int, stderr: str) -> str | None:
    if returncode < 0:  # the kernel's OOM killer acts before the watchdog's next look
        return f"killed by signal {-returncode} (out of memory)"
    if returncode != 0:
        lines = stderr.strip().splitlines() or ["no output"]
        return "error: " + lines[-1][:300]
    return None


def run_measured(
    cmd: list[str],
    log: Path,
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    nvml: Callable[[], int] | None = None,
) -> dict:
    """Run ``cmd`` alone, its output to ``log``: wall seconds of the whole process, its exit status and
    the peak memory by NVML when ``nvml`` is given (device bytes in use, above ``base`` before it
    started), else by the resident memory of its process tree, sampled every 0.1 s."""
    started = time.perf_counter()
    base = nvml() if nvml else 0
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        peak, killed = watch(proc, nvml or tree_rss_reader(proc.pid), None, timeout, interval=0.1)
        if killed:
            out.write(f"\nkilled after {timeout:.0f} s\n")
    return {
        "returncode": proc.returncode,
        "wall_s": round(time.perf_counter() - started, 3),
        "peak_gib": round((max(peak, base) - base) / GIB, 3),
        "base_gib": round(base / GIB, 3),
        "memory_measure": "nvml (device memory in use, CUDA context included)"
        if nvml
        else "process tree RSS",
    }


def child(measure: Callable[..., dict]) -> bool:
    """A bench's child side: run as ``python -m bench.<name> --child '<json>'``, print
    ``measure(**json)`` as one JSON line and return True; else False (the parent goes on)."""
    if len(sys.argv) != 3 or sys.argv[1] != CHILD:
        return False
    print(json.dumps(measure(**json.loads(sys.argv[2]))))
    return True


def run(
    module: str,
    contenders: Iterable[dict],
    cap_gb: float | None = None,
    timeout: float | None = None,
    strict: bool = True,
) -> list[dict]:
    """Each contender's record, measured in its own watched process (``python -m module --child``):
    its ``measure``'s record and ``process_peak_gb``. A contender that fails or passes ``cap_gb`` or
    ``timeout`` stops the bench (``strict``) or is recorded as ``failed`` (with its arguments)."""
    rows = []
    for args in contenders:
        record = run_watched([sys.executable, "-m", module, CHILD, json.dumps(args)], cap_gb, timeout)
        if "failed" in record and strict:
            raise SystemExit(f"{module} {json.dumps(args)} failed: {record['failed']}")
        rows.append({**args, **record} if "failed" in record else record)
        print(f"{module} {json.dumps(args)}: {record.get('failed', 'done')}", file=sys.stderr, flush=True)
    return rows


def timed_command(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system of the command's processes) and the standard output
    of ``cmd`` run from the repository root; its failure stops the bench with its last error lines."""
    import resource

    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})})
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


# ----------------------------------------------------------------------------------------------
# Where a measurement ran


def machine() -> dict:
    """The machine, library versions, commit and date of a measurement (a GPU's name, memory, CUDA
    and driver too)."""
    import torch
    import transformers

    record = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpus": os.cpu_count(),
        "commit": commit(),
        "date": time.strftime("%Y-%m-%d"),
    }
    if torch.cuda.is_available():
        record["gpu"] = torch.cuda.get_device_name(0)
        record["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        record["cuda"] = torch.version.cuda
        try:
            import pynvml

            pynvml.nvmlInit()
            record["driver"] = pynvml.nvmlSystemGetDriverVersion()
        except Exception:
            pass
    try:
        from importlib.metadata import version

        record["longppl"] = version("longppl")
    except Exception:
        record["longppl"] = None
    return record


def commit() -> str | None:
    """The commit measured: ``BENCH_COMMIT`` where set (a copy without git), else git's HEAD."""
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        return done.stdout.strip() or None
    except OSError:
        return None


def stamp() -> str:
    """The machine in words (``pipeline.provenance.machine``), the commit and the date, for a page."""
    from pipeline.provenance import machine as in_words

    return f"{in_words()}; commit {commit()}, {time.strftime('%Y-%m-%d')}"


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """A bench's command line, its module's docstring as the help (kept as written)."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
