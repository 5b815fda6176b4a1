"""Stage 1 on datatrove's executors: the same artifact however it ran (one task in one process, 4 tasks on
2 workers, a worker killed mid-document then the run again, the Slurm executor's own array script run by
a stand-in sbatch, the Ray executor on a local Ray instance), a second run refused naming the holder,
and where the tasks run checked before any model loads."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.artifact.reader import load_artifact
from pipeline.errors import PipelineError
from pipeline.keytokens.plan import assign
from pipeline.models.loading import ModelChoice
from tests.support import DISTRIBUTED_WORDS as WORDS
from tests.support import (
    ROOT,
    cli,
    compose_keytokens,
    error_lines,
    job,
    keytokens_command,
    keytokens_overrides,
    messages,
    run_cmd,
    run_keytokens,
)
from tests.support import table_bytes as tables

STANDIN = ROOT / "tests" / "fixtures" / "slurm"  # sbatch, srun and scontrol stood in on this machine


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    import random

    rng = random.Random(0)
    path = tmp_path_factory.mktemp("engine") / "corpus.jsonl"
    rows = [
        {"id": f"d{i}", "text": " ".join(rng.choice(WORDS) for _ in range(60 + 25 * i))} for i in range(12)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def identity(root: Path) -> tuple[str, str, str]:
    artifact = load_artifact(root)
    return artifact.manifest["fingerprint"], artifact.identity.discrete, artifact.contents


@pytest.fixture(scope="module")
def reference(tiny_model_dir, corpus, tmp_path_factory):
    """One task in one process (the default): its tables' bytes and its identity."""
    out = tmp_path_factory.mktemp("reference")
    done = run_cmd(keytokens_command(tiny_model_dir, corpus, out))
    assert done.returncode == 0, done.stderr[-2000:]
    return tables(out / "test"), identity(out / "test")


def environment(**extra: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), **extra}


def test_tasks_are_balanced_by_tokens_and_deterministic():
    lengths = [100, 90, 80, 70, 10, 10, 5]
    owners = assign(lengths, 2)
    assert owners == assign(lengths, 2) == [0, 1, 1, 0, 0, 1, 0]
    loads = [sum(n for n, o in zip(lengths, owners, strict=True) if o == r) for r in range(2)]
    assert abs(loads[0] - loads[1]) <= 10 and assign(lengths, 1) == [0] * 7
    assert sorted(set(assign(lengths, 9))) == list(range(7))  # more tasks than documents: some get none


def test_four_tasks_on_two_workers_give_the_same_artifact(tiny_model_dir, corpus, tmp_path, reference):
    """Each task in its own process, two at once: the same table bytes and identity as one task; the
    manifest says how it ran, and the engine's folder is gone."""
    done = run_cmd(keytokens_command(tiny_model_dir, corpus, tmp_path, "tasks=4", "workers=2"))
    assert done.returncode == 0, done.stderr[-3000:]
    root = tmp_path / "test"
    assert (tables(root), identity(root)) == reference
    run = json.loads((root / "manifest.json").read_text())["run"]
    assert (run["executor"], run["tasks"], run["workers"], run["gpus_per_task"]) == ("local", 4, 2, 0)
    assert (
        run["devices"] == ["cpu"] * 4 and not (root / ".datatrove").exists() and not (root / "parts").exists()
    )


# The rerun, with a look at the engine's folder just before the tables are merged.
LOOK_BEFORE_FINALIZE = """
import json, os, runpy
from pathlib import Path
import pipeline.artifact.writer as writer

real = writer.ArtifactWriter.finalize
def finalize(self, *args, **kwargs):
    engine = self.root / ".datatrove"
    state = {
        "parts": {p.name: p.stat().st_mtime_ns for p in self.parts.iterdir()},
        "tasks": {p.name: [p.stat().st_mtime_ns, json.loads(p.read_text())] for p in engine.glob("tasks/*")},
        "completions": sorted(p.name for p in (engine / "completions").iterdir()),
    }
    Path(os.environ["LOOK"]).write_text(json.dumps(state))
    return real(self, *args, **kwargs)
writer.ArtifactWriter.finalize = finalize
runpy.run_module("pipeline.commands.keytokens", run_name="__main__")
"""


def kill_a_task_mid_document(proc: subprocess.Popen, root: Path) -> tuple[int, list[int], list[int]]:
    """SIGKILL the process of a task that has written some of its documents and not all (so it is in
    the middle of one): the task, its documents, and those written."""
    engine, deadline = root / ".datatrove", time.time() + 900
    while proc.poll() is None and time.time() < deadline:
        try:
            plan = json.loads((engine / "plan.json").read_text())
        except (OSError, ValueError):
            time.sleep(0.01)
            continue
        done = {int(p.name) for p in (engine / "completions").glob("*")}
        for task, indices in enumerate(plan["tasks"]):
            written = [i for i in indices if (root / "parts" / f"{i:06d}").is_dir()]
            running = engine / "running" / f"{task:05d}.json"
            if task not in done and 0 < len(written) < len(indices) and running.is_file():
                os.kill(json.loads(running.read_text())["pid"], signal.SIGKILL)
                return task, indices, written
        time.sleep(0.003)
    raise AssertionError("no task was caught in the middle of its documents")


def test_a_worker_killed_mid_document_then_the_run_again(tiny_model_dir, corpus, tmp_path, reference):
    """4 tasks on 2 workers, one worker killed (SIGKILL) in the middle of a document: the other tasks go
    on and finish, the run ends with one error line naming the task. Run again, it runs that task
    alone, which resumes from its last finished document; the finished tasks' parts and records are
    untouched, and the artifact is the one task's."""
    cmd = keytokens_command(tiny_model_dir, corpus, tmp_path, "tasks=4", "workers=2")
    root = tmp_path / "test"
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    task, indices, written = kill_a_task_mid_document(proc, root)
    _, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 2 and "Traceback" not in stderr, stderr[-3000:]
    (line,) = [x for x in stderr.splitlines() if x.startswith("error: ")]
    assert re.match(
        rf"error: 1 of 4 tasks did not finish .* task {task}: its process \(pid \d+ on .*\) ended", line
    )
    engine = root / ".datatrove"
    completed = sorted(p.name for p in (engine / "completions").iterdir())
    assert completed == [f"{t:05d}" for t in range(4) if t != task]
    parts = {p.name: p.stat().st_mtime_ns for p in (root / "parts").iterdir()}
    records = {p.name: p.stat().st_mtime_ns for p in (engine / "tasks").iterdir()}
    look = tmp_path / "look.json"
    again = subprocess.run(
        [sys.executable, "-c", LOOK_BEFORE_FINALIZE, *cmd[3:]], cwd=ROOT, env=environment(LOOK=str(look)),
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    state = json.loads(look.read_text())
    assert state["completions"] == [f"{t:05d}" for t in range(4)]
    assert {name: state["parts"][name] for name in parts} == parts  # nothing written before is written again
    assert {name: state["tasks"][name][0] for name in records} == records  # the finished tasks did not run
    record = state["tasks"][f"{task:05d}.json"][1]
    assert (record["resumed"], record["scored"]) == (len(written), len(indices) - len(written))
    assert (tables(root), identity(root)) == reference
    assert load_artifact(root).manifest["run"]["resumed_documents"] == len(parts)


def test_slurm_array_script_run_by_a_stand_in_sbatch(tiny_model_dir, corpus, tmp_path, reference):
    """executor=slurm: datatrove writes the job array's script and submits it (to a stand-in sbatch that
    queues it); the command returns saying so, and run again while the job is queued it is refused,
    naming the job. Once the array has run (its real script, each index in turn, with Slurm's
    variables), the same command writes the artifact: the one task's."""
    queue = tmp_path / "queue"
    env = environment(
        PATH=f"{STANDIN}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        STANDIN_SBATCH_QUEUE=str(queue),
    )
    cmd = keytokens_command(
        tiny_model_dir, corpus, tmp_path, "executor=slurm", "tasks=2", "slurm.partition=test"
    )
    submitted = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    assert re.search(r"^submitted   Slurm job \d+: 2 task\(s\) of stage 1", submitted.stdout, re.MULTILINE)
    root = tmp_path / "test"
    script = (root / ".datatrove" / "launch_script.slurm").read_text()
    assert "#SBATCH --array=0-1" in script and "#SBATCH --partition=test" in script
    assert "launch_pickled_pipeline" in script and not (root / "manifest.json").exists()
    job = re.search(r"Slurm job (\d+)", submitted.stdout)[1]
    held = tmp_path / "held"  # squeue, which lists the array while it is queued
    held.mkdir()
    (held / "squeue").write_text(f"#!/bin/sh\necho {job}\n")
    (held / "squeue").chmod(0o755)
    queued = {**env, "PATH": f"{held}{os.pathsep}{env['PATH']}"}
    refused = subprocess.run(cmd, cwd=ROOT, env=queued, capture_output=True, text=True, timeout=900)
    assert refused.returncode == 2 and [x for x in refused.stderr.splitlines() if x.startswith("error")] == [
        f"error: Slurm job {job} of a keytokens run is still queued or running on {root} (squeue -j {job}): "
        f"wait for it to finish, or cancel it (scancel {job}), then run this again"
    ]
    subprocess.run([str(STANDIN / "sbatch"), "--run-queue", str(queue)], env=env, check=True, timeout=900)
    assert sorted(p.name for p in (root / ".datatrove" / "completions").iterdir()) == ["00000", "00001"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tables(root), identity(root)) == reference
    run = load_artifact(root).manifest["run"]
    assert (run["executor"], run["tasks"], run["devices"]) == ("slurm", 2, ["cpu", "cpu"])


def test_ray_executor_on_a_local_instance(tiny_model_dir, corpus, tmp_path, reference):
    """executor=ray on a local Ray instance of 2 CPUs: each task an actor; the one task's artifact."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20)
    try:
        overrides = keytokens_overrides(tiny_model_dir, corpus, tmp_path, "max_tokens=400")
        engine = ["executor=ray", "tasks=2", "workers=2", "ray.mem_per_cpu_gb=0.5"]
        manifest = run_keytokens(compose_keytokens([*overrides, *engine]))
    finally:
        ray.shutdown()
    assert (tables(tmp_path / "test"), identity(tmp_path / "test")) == reference
    assert (manifest["run"]["executor"], manifest["run"]["workers"]) == ("ray", 2)


def test_in_process_run_matches_the_subprocess(tiny_model_dir, corpus, tmp_path, reference):
    run_keytokens(compose_keytokens(keytokens_overrides(tiny_model_dir, corpus, tmp_path, "max_tokens=400")))
    assert (tables(tmp_path / "test"), identity(tmp_path / "test")) == reference


@pytest.fixture
def no_model_loads(monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError("a model loaded")

    monkeypatch.setattr(ModelChoice, "load", refused)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["workers=3", "tasks=2"], "setting workers=3 is more than tasks=2: a worker would have no task"),
        (["gpus_per_task=1"], "setting gpus_per_task=1 with device=cpu: the evaluator would not use them"),
        (
            ["gpus_per_task=1", "device=auto"],
            "gpus_per_task=1 needs 1 GPU(s) for the tasks that run at once, and this machine shows 0",
        ),
        (["executor=slurm"], "executor=slurm needs Slurm's sbatch on the PATH, and there is none"),
        (["executor=slurm", "gpus_per_task=0", "device=cuda"], "setting gpus_per_task=0 with device=cuda"),
    ],
)
def test_where_tasks_run_is_checked_before_any_model_loads(
    tiny_model_dir, corpus, tmp_path, no_model_loads, monkeypatch, overrides, message
):
    monkeypatch.setenv("PATH", "/nowhere")  # no sbatch
    monkeypatch.setattr("torch.cuda.device_count", lambda: 0)
    base = keytokens_overrides(tiny_model_dir, corpus, tmp_path)
    keys = {o.split("=")[0] for o in overrides}
    with pytest.raises(PipelineError, match=re.escape(message)):
        run_keytokens(compose_keytokens([*(o for o in base if o.split("=")[0] not in keys), *overrides]))
    assert not (tmp_path / "test").exists()


def test_ray_not_installed_and_a_torchrun_launch(
    tiny_model_dir, corpus, tmp_path, no_model_loads, monkeypatch
):
    cfg = compose_keytokens(keytokens_overrides(tiny_model_dir, corpus, tmp_path, "executor=ray"))
    monkeypatch.setitem(sys.modules, "ray", None)  # as if it were not installed
    with pytest.raises(
        PipelineError, match=re.escape("pip install 'longppl-pipeline[ray]' (in a checkout: make setup-ray)")
    ):
        run_keytokens(cfg)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(PipelineError, match=r"not under torchrun .* pass workers=N tasks=N"):
        run_keytokens(compose_keytokens(keytokens_overrides(tiny_model_dir, corpus, tmp_path)))


def test_bad_engine_settings_are_one_line_each(tiny_model_dir, corpus, tmp_path):
    """From the command line: one ``error:`` line for each, exit status 2, no traceback."""
    base = keytokens_overrides(tiny_model_dir, corpus, tmp_path)
    done = cli(
        "pipeline.commands.keytokens", "--multirun", *base, "executor=local,spark", "tasks=0,2", "workers=3",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )  # fmt: skip
    found = messages(done.stderr)
    assert len(error_lines(done.stderr)) == 4
    assert job(found, "executor=local", "tasks=0") == "setting tasks=0: Input should be greater than 0"
    assert job(found, "executor=spark", "tasks=2") == (
        "setting executor='spark': Input should be 'local', 'slurm' or 'ray'"
    )
    assert job(found, "executor=local", "tasks=2").startswith("setting workers=3 is more than tasks=2")


def holder_pid(lock: Path, procs: list[subprocess.Popen], deadline: float) -> int:
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
    naming the holder (paused with SIGSTOP while the other tries). Then a run killed while it holds the
    lock (SIGKILL): the next run takes the lock and ends with the same tables."""
    cmd = keytokens_command(tiny_model_dir, corpus, tmp_path)
    lock = tmp_path / ".test.lock"
    procs = [
        subprocess.Popen(
            cmd, cwd=ROOT, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
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
    assert tables(tmp_path / "test") == reference[0]

    shutil.rmtree(tmp_path / "test")
    killed = subprocess.Popen(
        cmd, cwd=ROOT, env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
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
    assert (tables(tmp_path / "test"), identity(tmp_path / "test")) == reference
