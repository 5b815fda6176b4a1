"""The benchmarks' one runner (``bench/runner.py``): a contender in its own watched process (its records
read back, its peak, a memory cap and a time limit), a case's child timing each contender's work with
the one clock, rows cached, skipped past a budget, a failure stopping a strict bench."""

from __future__ import annotations

import json
import sys

import pytest

from bench import runner, shared

PRINTS = (
    "import json, time; x = bytearray(200 * 2**20); x[::4096] = b'x' * len(x[::4096]); time.sleep(0.3); "
    f"print('noise'); print({runner.RECORD!r} + json.dumps({{'contender': 'a', 'n': 1}}))"
)


def test_a_process_is_clocked_and_its_records_read_back():
    process, records = runner.run_process([sys.executable, "-c", PRINTS])
    assert records == [{"contender": "a", "n": 1}] and process["returncode"] == 0 and "failed" not in process
    assert 0.2e9 < process["peak_bytes"] < 2e9 and process["seconds"] >= 0.3 and process["cpu_s"] > 0


def test_a_process_is_killed_past_its_cap_or_its_time_and_an_error_is_named(tmp_path):
    capped, _ = runner.run_process([sys.executable, "-c", PRINTS], cap_gb=0.1)
    assert capped["failed"] == "exceeded the 0.1 GB memory cap"
    slow, _ = runner.run_process([sys.executable, "-c", "import time; time.sleep(30)"], timeout=1)
    assert slow["failed"] == "timed out (1 s)" and slow["seconds"] < 10
    log = tmp_path / "broken.log"
    broken, _ = runner.run_process(
        [sys.executable, "-c", "raise SystemExit('error: no such model')"], log=log
    )
    assert broken["failed"] == "error: error: no such model" and broken["returncode"] == 1
    assert log.read_text().strip() == "error: no such model"


def test_the_device_peak_is_above_what_was_in_use_before(monkeypatch):
    """With NVML, a process's memory is the GPU's in use: its start is what others held before."""
    readings = iter([2 * 2**30, 5 * 2**30, 7 * 2**30])
    monkeypatch.setattr(runner, "nvml_reader", lambda: lambda: next(readings, 3 * 2**30))
    process, _ = runner.run_process([sys.executable, "-c", "import time; time.sleep(0.5)"], nvml=True)
    assert process["start_bytes"] == 2 * 2**30 and process["above_start_bytes"] == 5 * 2**30
    assert process["memory"].startswith("nvml")


def test_without_a_gpu_there_is_no_nvml_reader():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU machine: NVML answers")
    assert runner.nvml_reader() is None


def setup(contender: str, size: int, scale: int = 1):
    if contender == "missing":
        raise runner.Skip("not on this machine")
    if contender == "broken":
        raise ValueError("no such kernel")
    block = bytearray(size * scale * 2**20)
    return lambda: {"touched": sum(block[::4096]) + len(block[::4096])}


CASE = runner.Case("example", contenders=("ok", "missing", "broken"), sizes=(50,), setup=setup, together=True)


def test_the_child_times_each_contender_and_goes_on_past_a_failure(monkeypatch, capsys):
    job = {"contenders": ["ok", "missing", "broken", "ok"], "size": 20, "options": {"scale": 2}, "repeats": 3}
    monkeypatch.setattr(sys, "argv", ["bench.example", runner.CHILD, json.dumps(job)])
    assert runner.child(CASE)
    ok, missing, broken, _ = [json.loads(line.removeprefix(runner.RECORD)) for line in
                              capsys.readouterr().out.splitlines()]  # fmt: skip
    assert ok["touched"] == 40 * 2**20 // 4096 and len(ok["work"]["runs"]) == 3
    assert ok["work"]["seconds"] >= 0 and ok["work"]["cpu_s"] >= 0 and ok["work"]["peak_bytes"] > 0
    assert missing == {"contender": "missing", "size": 20, "skipped": "not on this machine"}
    assert broken["failed"] == "ValueError: no such kernel"
    monkeypatch.setattr(sys, "argv", ["bench.example", "--tokens", "3"])
    assert not runner.child(CASE)


def test_rows_of_commands_cached_skipped_or_stopping_the_bench(tmp_path):
    """A command case: each contender's row, read back from the cache the second time; past the budget
    a contender is skipped; a strict bench stops at a failure."""
    code = {"fast": "pass", "slow": "import time; time.sleep(2)", "broken": "raise SystemExit(3)"}
    case = runner.Case(
        "commands", contenders=tuple(code), command=lambda c, size: [sys.executable, "-c", code[c]]
    )
    cache = tmp_path / "rows.jsonl"
    fast, slow, broken = runner.run(case, cache=cache)
    assert fast["work"]["seconds"] < slow["work"]["seconds"] and broken["failed"] == "error: no output"
    again = runner.run(case, contenders=["fast", "slow"], cache=cache)
    assert all(r["cached"] for r in again) and [r["work"] for r in again] == [fast["work"], slow["work"]]
    skipped = runner.run(case, contenders=["slow", "fast"], repeats=2, budget=21)
    assert len(skipped[0]["work"]["runs"]) == 2 and skipped[1]["skipped"] == "out of time (21 s budget)"
    with pytest.raises(SystemExit, match="commands broken at None failed: error: no output"):
        runner.run(case, contenders=["broken"], strict=True)


def test_the_clock_sees_an_allocation_and_synchronises_around_the_block():
    calls = []
    with runner.Clock(runner.rss_reader(tree=False), cpu=runner.own_cpu, sync=lambda: calls.append("sync"),
                      interval=0.001) as clock:  # fmt: skip
        calls.append("work")
        block = bytearray(100 * 2**20)
        block[::4096] = b"x" * len(block[::4096])
    assert calls == ["sync", "work", "sync"] and clock.peak - clock.start > 0.05e9
    assert clock.began <= clock.ended and clock.seconds >= 0 and clock.cpu_s >= 0


def test_paths_are_recorded_relative_to_the_repository(tmp_path):
    assert shared.relative(shared.ROOT / "artifacts" / "x") == "artifacts/x"
    assert shared.relative("../shared/data") == "../shared/data" and shared.relative(tmp_path / "y") == "y"
    assert not shared.default_artifact().is_absolute()
