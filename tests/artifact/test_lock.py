"""The output directory's lock: a refused run names the holder, even when it reads the holder's record
in the instant between the lock being taken and the record being written."""

from __future__ import annotations

import json
import threading
import time

import pytest

from pipeline.artifact import lock
from pipeline.errors import PipelineError


def test_a_record_written_just_after_the_lock_is_still_read(tmp_path):
    path = tmp_path / ".out.lock"
    path.write_text("")  # taken, its record not yet written
    record = {"pid": 4242, "host": "node", "since": "2026-11-26T00:00:00+00:00", "command": "keytokens"}
    writer = threading.Timer(0.2, lambda: path.write_text(json.dumps(record)))
    writer.start()
    started = time.monotonic()
    assert lock.describe_holder(path).startswith("pid 4242 on node since")
    assert time.monotonic() - started < 2.0
    writer.join()


def test_a_record_that_never_becomes_whole_is_another_process(tmp_path):
    path = tmp_path / ".out.lock"
    path.write_text('{"pid": 1')
    assert lock.describe_holder(path, wait=0.05) == "another process"


def test_a_second_holder_is_refused_naming_the_first(tmp_path):
    out = tmp_path / "out"
    refused = pytest.raises(PipelineError, match=r"another keytokens run is writing .*: pid \d+ on ")
    with lock.exclusive(out, "keytokens run"), refused, lock.exclusive(out, "keytokens run"):
        pass
