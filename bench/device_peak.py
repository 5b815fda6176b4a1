"""One measure of peak memory for every contender of a GPU benchmark: each runs in its own process,
and this process samples the device's used memory (NVML: every process on the GPU, the CUDA context
included) every 0.1 s while it runs. Without NVML (a CPU run, or a machine without the NVIDIA
management library) the measure is the resident memory of the contender's process tree instead, and
the record says which measure it is."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

GIB = 2**30


def nvml_reader(index: int = 0) -> Callable[[], int] | None:
    """Bytes in use on GPU ``index`` as NVML reports them, or None where NVML is not there."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # no library, no driver or no GPU: the caller falls back to resident memory
        return None
    return lambda: int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)


def tree_rss_reader(pid: int) -> Callable[[], int]:
    """Resident bytes of process ``pid`` and its children (0 once it has exited)."""
    import psutil

    def read() -> int:
        try:
            root = psutil.Process(pid)
            return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
        except psutil.Error:
            return 0

    return read


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
    started), else by the resident memory of its process tree."""
    started = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        read = nvml or tree_rss_reader(proc.pid)
        with PeakSampler(read) as sampler:
            try:
                returncode = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                returncode = proc.wait()
                out.write(f"\nkilled after {timeout:.0f} s\n")
    base = sampler.base if nvml else 0
    return {
        "returncode": returncode,
        "wall_s": round(time.perf_counter() - started, 3),
        "peak_gib": round((sampler.peak - base) / GIB, 3),
        "base_gib": round(base / GIB, 3),
        "memory_measure": "nvml (device memory in use, CUDA context included)"
        if nvml
        else "process tree RSS",
    }
