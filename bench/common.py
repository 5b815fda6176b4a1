"""What the benchmarks share: peak memory sampling, jobs in watched subprocesses, the repository
root, the default artifact and the record of the machine a measurement ran on. The benchmarks run as modules from the repository root
(``python -m bench.<name>``, as the Makefile does)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import subprocess
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the embedded models and local artifacts need no network


def slug(name: str) -> str:
    """A contender's or run's name as a file name: lower case, anything but letters and digits a '-'."""
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


def default_artifact() -> Path:
    """The artifact `make keytokens` writes by default (``default_artifact`` in conf/common.yaml)."""
    from pipeline.commands.shell import compose

    return ROOT / str(compose("score").artifact)


def memory_record(baseline: int, peak: PeakMemory, start: float) -> dict[str, float]:
    """A measurement's memory in GB (``baseline``: bytes before it, e.g. the loaded model) and its
    seconds since ``start`` (``time.perf_counter``)."""
    return {
        "baseline_gb": baseline / 1e9,
        "peak_gb": peak.peak / 1e9,
        "above_model_gb": (peak.peak - baseline) / 1e9,
        "seconds": time.perf_counter() - start,
    }


class PeakMemory:
    """Peak memory during a block: this process's resident memory sampled in a background thread
    (``start`` is the RSS on entry, after giving freed heap back to the system), or on a GPU the peak
    of ``torch.cuda.max_memory_allocated`` (``start``: the allocation on entry)."""

    def __init__(self, interval: float = 0.01, cuda: bool = False):
        import psutil

        self.process, self.interval, self.cuda = psutil.Process(), interval, cuda
        self.start = self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(self.interval)

    def __enter__(self) -> PeakMemory:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.start = self.peak = torch.cuda.memory_allocated()
            return self
        with contextlib.suppress(OSError):  # glibc: give freed heap back, so that the peak shows
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        self.start = self.peak = self.process.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated()
            return
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)

    @property
    def above_start_gb(self) -> float:
        return (self.peak - self.start) / 2**30


def run_watched(cmd: list[str], cap_gb: float, timeout: float) -> dict:
    """Run ``cmd`` (which prints one JSON object as its last stdout line) in a subprocess whose
    resident memory, children included, is sampled every 50 ms; kill it past ``cap_gb`` or
    ``timeout`` seconds. Returns that object with ``process_peak_gb``, or ``failed`` and the peak."""
    import psutil

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT)
        watched, peak, started, killed = psutil.Process(proc.pid), 0, time.time(), None
        while proc.poll() is None:
            try:
                rss = sum(p.memory_info().rss for p in [watched, *watched.children(recursive=True)])
            except psutil.NoSuchProcess:
                break
            peak = max(peak, rss)
            if rss > cap_gb * 1e9:
                killed = f"exceeded the {cap_gb:g} GB memory cap"
            elif time.time() - started > timeout:
                killed = f"timed out ({timeout:.0f} s)"
            if killed:
                proc.kill()
            time.sleep(0.05)
        proc.wait()
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


def machine() -> dict:
    import torch
    import transformers

    record = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpus": os.cpu_count(),
        "commit": os.environ.get("BENCH_COMMIT") or _git_head(),
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


def _git_head() -> str | None:
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
            ).stdout.strip()
            or None
        )
    except OSError:
        return None
