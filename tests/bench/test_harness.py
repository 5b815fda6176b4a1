"""The benchmarks' harness (``bench/harness.py``): a contender in its own watched process, its record
read back, a failure stopping the bench or recorded, and the in-process measures."""

from __future__ import annotations

import json
import sys

import pytest

from bench import harness

PRINTS = (
    "import json, time; x = bytearray(200 * 2**20); time.sleep(0.3); "
    "print('noise'); print(json.dumps({'a': 1}))"
)


def test_run_watched_reads_the_last_json_line_and_the_peak():
    record = harness.run_watched([sys.executable, "-c", PRINTS], cap_gb=None, timeout=60)
    assert record["a"] == 1 and 0.2 < record["process_peak_gb"] < 2


def test_run_watched_kills_past_the_cap_or_the_time_and_names_an_error():
    capped = harness.run_watched([sys.executable, "-c", PRINTS], cap_gb=0.1, timeout=60)
    assert capped["failed"] == "exceeded the 0.1 GB memory cap"
    slow = harness.run_watched([sys.executable, "-c", "import time; time.sleep(30)"], None, timeout=1)
    assert slow["failed"] == "timed out (1 s)"
    broken = harness.run_watched([sys.executable, "-c", "raise SystemExit('error: no such model')"], None, 60)
    assert broken["failed"] == "error: error: no such model"


def test_child_prints_its_measure_of_the_arguments(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["bench.x", harness.CHILD, json.dumps({"tokens": 3})])
    assert harness.child(lambda tokens: {"tokens": tokens, "double": 2 * tokens})
    assert json.loads(capsys.readouterr().out) == {"tokens": 3, "double": 6}
    monkeypatch.setattr(sys, "argv", ["bench.x", "--tokens", "3"])
    assert not harness.child(lambda **_: {})


def test_run_stops_at_a_failed_contender_or_records_it(monkeypatch):
    commands = []

    def watched(cmd, cap_gb, timeout):
        commands.append(cmd)
        args = json.loads(cmd[-1])
        return {"failed": "exceeded the 1 GB memory cap"} if args["n"] == 2 else {**args, "peak": 1}

    monkeypatch.setattr(harness, "run_watched", watched)
    rows = harness.run("bench.case", [{"n": 1}, {"n": 2}], cap_gb=1, strict=False)
    assert rows == [{"n": 1, "peak": 1}, {"n": 2, "failed": "exceeded the 1 GB memory cap"}]
    assert commands[0] == [sys.executable, "-m", "bench.case", harness.CHILD, '{"n": 1}']
    with pytest.raises(SystemExit, match="failed: exceeded the 1 GB memory cap"):
        harness.run("bench.case", [{"n": 2}])


def test_timed_takes_the_median_of_synced_calls():
    calls = []
    wall, cpu = harness.timed(lambda: calls.append("work"), 3, sync=lambda: calls.append("sync"))
    assert calls == ["sync", "work", "sync"] * 3 and wall >= 0 and cpu >= 0
    seconds, out = harness.synced(lambda: 42)
    assert out == 42 and seconds >= 0


def test_peak_memory_sees_an_allocation():
    with harness.PeakMemory(interval=0.001) as peak:
        block = bytearray(100 * 2**20)
        block[::4096] = b"x" * len(block[::4096])
    assert peak.above_start_gb > 0.05
