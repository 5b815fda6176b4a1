"""`make curate` and `make curate-select` on the tiny random evaluator: the input's columns kept beside the
longppl_* ones; 2 tasks on 2 workers (and one big file split by rows) equal to 1 task; a task killed
mid-shard, then the run again (nothing lost, nothing done twice, the finished shards untouched); the
output folder checked; the selection read by ``datasets`` offline, with its card's record; bad input,
one ``error:`` line each before any model loads."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.support import DISTRIBUTED_WORDS as WORDS
from tests.support import ROOT, run_cmd


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Three Parquet shards of 6 rows, with a column of their own (``source``) and ``body`` as the text."""
    rng, folder = random.Random(0), tmp_path_factory.mktemp("corpus") / "shards"
    folder.mkdir()
    for f in range(3):
        rows = [
            {
                "doc": f"f{f}-{i}",
                "body": " ".join(rng.choice(WORDS) for _ in range(20 + 15 * i)),
                "source": f"s{i}",
            }
            for i in range(6)
        ]
        pq.write_table(pa.Table.from_pylist(rows), folder / f"part-{f}.parquet")
    return folder


def curate_command(model: Path, corpus: Path, out: Path, *extra: str, module: str = "curate") -> list[str]:
    args = [
        "evaluator=local", f"evaluator.spec={model}", f"input.path={corpus}", "input.text_key=body",
        "input.id_key=doc", f"output_dir={out}", "K=16", "d=8", "max_tokens=120", "dtype=float64",
        "device=cpu", "alpha=0.5", "beta=-30", "progress=false", "head_chunk=16",
    ]  # fmt: skip
    return [sys.executable, "-m", "pipeline.commands.curate", *args, *extra, f"hydra.run.dir={out}-logs"]


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def rows(out: Path) -> pl.DataFrame:
    return pl.read_parquet(out / "data" / "*.parquet").sort("doc")


@pytest.fixture(scope="module")
def reference(tiny_model_dir, corpus, tmp_path_factory) -> pl.DataFrame:
    out = tmp_path_factory.mktemp("one") / "curated"
    done = run_cmd(curate_command(tiny_model_dir, corpus, out))
    assert done.returncode == 0, done.stderr[-2000:]
    return rows(out)


def test_columns_kept_and_added(reference):
    assert reference.height == 18 and reference["doc"].n_unique() == 18
    assert reference.columns[:3] == ["doc", "body", "source"]
    added = {c for c in reference.columns if c.startswith("longppl_")}
    assert added >= {"longppl_key_ratio", "longppl_lsd_p99", "longppl_mean_positive_lsd_last", "longppl_ppl"}
    assert (reference["longppl_tokens"] <= 120).all() and reference["longppl_ppl"].is_not_null().all()


def test_two_tasks_on_two_workers_equal_one_task(tiny_model_dir, corpus, tmp_path, reference):
    out = tmp_path / "curated"
    done = run_cmd(curate_command(tiny_model_dir, corpus, out, "tasks=2", "workers=2"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in (out / "data").iterdir()) == [
        "train-00000-of-00002.parquet", "train-00001-of-00002.parquet",
    ]  # fmt: skip
    assert rows(out).equals(reference)
    record = json.loads((out / "curate.json").read_text())
    assert record["rows"] == 18 and sum(record["shards"].values()) == 18
    again = run_cmd(curate_command(tiny_model_dir, corpus, out, "tasks=2", "workers=2"))
    assert again.returncode == 0 and "nothing to do" in again.stdout


def test_one_big_file_is_split_by_rows(tiny_model_dir, corpus, tmp_path, reference):
    one = tmp_path / "one.parquet"
    pq.write_table(pa.concat_tables([pq.read_table(p) for p in sorted(corpus.glob("*.parquet"))]), one)
    out = tmp_path / "curated"
    done = run_cmd(curate_command(tiny_model_dir, one, out, "tasks=3", "workers=2"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(json.loads((out / "curate.json").read_text())["shards"].values()) == [6, 6, 6]
    assert rows(out).equals(reference)


def test_a_task_killed_mid_shard_then_the_run_again(tiny_model_dir, corpus, tmp_path, reference):
    """3 tasks on 2 workers, one task's process killed (SIGKILL) while it writes its shard: the run ends
    with one error line; run again, only that task runs (the finished shards are untouched) and the rows
    are the one task's, each id once."""
    out = tmp_path / "curated"
    cmd = curate_command(tiny_model_dir, corpus, out, "tasks=3", "workers=2")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    engine, killed, deadline = out / ".datatrove", None, time.time() + 300
    while killed is None and proc.poll() is None and time.time() < deadline:
        done = {p.name for p in (engine / "completions").glob("*")}
        for task in range(3):
            running = engine / "running" / f"{task:05d}.json"
            stats = engine / "stats" / f"{task:05d}.json"
            if f"{task:05d}" not in done and running.is_file() and not stats.exists():
                try:
                    os.kill(json.loads(running.read_text())["pid"], signal.SIGKILL)
                except (ValueError, ProcessLookupError):
                    continue
                killed = task
                break
        time.sleep(0.002)
    _, stderr = proc.communicate(timeout=300)
    assert killed is not None, "no task was caught running"
    assert proc.returncode == 2 and len(error_lines(stderr)) == 1, stderr[-2000:]
    assert f"task {killed}: its process ended before it finished" in error_lines(stderr)[0]
    finished = {p.name: p.stat().st_mtime_ns for p in (out / "data").glob("*.parquet")}
    assert f"train-{killed:05d}-of-00003.parquet" not in finished and not (out / "curate.json").exists()
    again = run_cmd(cmd)
    assert again.returncode == 0, again.stderr[-2000:]
    assert {name: (out / "data" / name).stat().st_mtime_ns for name in finished} == finished
    assert not list((out / "data").glob("*.partial"))
    assert rows(out).equals(reference)


def test_a_row_that_cannot_be_read_stops_its_task_alone(tiny_model_dir, corpus, tmp_path, reference):
    """A row without text in one shard: its task stops, named by shard and row, the other tasks finish;
    the row fixed, the same output is refused (its input changed) and another one has the one task's rows."""
    broken, out = tmp_path / "shards", tmp_path / "curated"
    shutil.copytree(corpus, broken)
    table = pq.read_table(broken / "part-1.parquet")
    bodies = table.column("body").to_pylist()
    missing = table.set_column(1, "body", pa.array([*bodies[:3], None, *bodies[4:]]))
    pq.write_table(missing, broken / "part-1.parquet")
    cmd = curate_command(tiny_model_dir, broken, out, "tasks=3", "workers=2")
    done = run_cmd(cmd)
    assert done.returncode == 2 and len(error_lines(done.stderr)) == 1, done.stderr[-2000:]
    line = error_lines(done.stderr)[0]
    assert "1 of 3 tasks did not finish" in line and "task 1:" in line, line
    assert f"{broken / 'part-1.parquet'}, row 3: its body is missing, not text" in line, line
    assert sorted(p.name for p in (out / "data").glob("*.parquet")) == [
        "train-00000-of-00003.parquet", "train-00002-of-00003.parquet"]  # fmt: skip
    shutil.copy(corpus / "part-1.parquet", broken / "part-1.parquet")
    refused = run_cmd(cmd)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "other settings" in error_lines(refused.stderr)[0], refused.stderr[-2000:]
    again = run_cmd(curate_command(tiny_model_dir, broken, tmp_path / "again", "tasks=3", "workers=2"))
    assert again.returncode == 0, again.stderr[-2000:]
    assert rows(tmp_path / "again").equals(reference)


def test_a_jsonl_corpus_gives_the_parquet_ones_rows(tiny_model_dir, corpus, tmp_path, reference):
    folder = tmp_path / "jsonl"
    folder.mkdir()
    for shard in sorted(corpus.glob("*.parquet")):
        lines = [json.dumps(row) for row in pq.read_table(shard).to_pylist()]
        (folder / shard.with_suffix(".jsonl").name).write_text("\n".join(lines) + "\n")
    done = run_cmd(curate_command(tiny_model_dir, folder, tmp_path / "curated"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert rows(tmp_path / "curated").equals(reference)


@pytest.mark.parametrize(
    ("line", "why"),
    [("{not json", "not JSON"), ('["a list"]', "not a JSON object"), ('{"doc": "x", "body": " "}', "empty")],
)
def test_a_jsonl_line_that_cannot_be_read_is_named(tiny_model_dir, tmp_path, line, why):
    """datatrove's JSONL reader skips such a line with a warning in a log; here it is named, file and line
    (in a file after the first, whose first lines the launcher reads before any model loads)."""
    folder = tmp_path / "jsonl"
    folder.mkdir()
    good = [json.dumps({"doc": f"d{i}", "body": " ".join(WORDS[: 20 + i])}) for i in range(3)]
    (folder / "part-0.jsonl").write_text("\n".join(good) + "\n")
    (folder / "part-1.jsonl").write_text("\n".join([*good[:2], line, good[2]]) + "\n")
    done = run_cmd(curate_command(tiny_model_dir, folder, tmp_path / "curated"))
    assert done.returncode == 2 and len(error_lines(done.stderr)) == 1, done.stderr[-2000:]
    assert f"{folder / 'part-1.jsonl'}, row 2: " in error_lines(done.stderr)[0], done.stderr[-2000:]
    assert why in error_lines(done.stderr)[0]


def test_selection_read_by_datasets_with_its_card(tiny_model_dir, corpus, tmp_path, reference):
    out = tmp_path / "curated"
    assert run_cmd(curate_command(tiny_model_dir, corpus, out)).returncode == 0
    chosen = tmp_path / "selected"
    select = [
        sys.executable, "-m", "pipeline.commands.curate_select", f"input={out}", f"output_dir={chosen}",
        "select.by=longppl_mean_positive_lsd", "select.top=0.25", f"hydra.run.dir={tmp_path}/logs",
    ]  # fmt: skip
    done = run_cmd(select)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = reference.sort("longppl_mean_positive_lsd", descending=True).head(5)["doc"].sort().to_list()
    code = (
        "import os; os.environ['HF_DATASETS_OFFLINE'] = '1'; import datasets, sys; "
        "d = datasets.load_dataset(sys.argv[1], split='train'); "
        "p = datasets.load_dataset('parquet', data_files=sys.argv[1] + '/data/*.parquet', split='train'); "
        "assert d['doc'] == p['doc']; print(','.join(sorted(d['doc'])))"
    )
    loaded = run_cmd([sys.executable, "-c", code, str(chosen)])
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert loaded.stdout.strip().split(",") == expected
    front = yaml.safe_load((chosen / "README.md").read_text().split("---\n")[1])
    s = front["longppl"]["selection"]
    assert (s["by"], s["documents"], s["kept_documents"]) == ("longppl_mean_positive_lsd", 18, 5)
    assert s["tokens"] == reference["longppl_tokens"].sum() and s["kept_tokens"] < s["tokens"]
    assert (
        front["longppl"]["evaluator"]["weights_sha256"]
        and front["longppl"]["settings"]["definition"]["K"] == 16
    )
    threshold = run_cmd([*select[:-3], "select.min=1e9", f"hydra.run.dir={tmp_path}/logs"])
    assert (
        threshold.returncode == 0
        and pq.read_table(chosen / "data" / "train-00000-of-00001.parquet").num_rows == 0
    )


def test_bad_input_is_one_line_before_any_model_loads(tiny_model_dir, corpus, tmp_path):
    empty, foreign, curated = tmp_path / "empty", tmp_path / "foreign", tmp_path / "curated"
    empty.mkdir()
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    (empty / "readme.txt").write_text("no shards")
    pq.write_table(
        pa.table({"doc": ["a"], "body": ["x"], "longppl_ppl": [1.0]}), curated.with_suffix(".parquet")
    )
    artifact, mixed = tmp_path / "artifact", tmp_path / "mixed"
    artifact.mkdir()
    (artifact / "manifest.json").write_text("{}")
    pq.write_table(pa.table({"text": ["x"]}), artifact / "documents.parquet")
    shutil.copytree(corpus, mixed)
    pq.write_table(pa.table({"doc": ["z"], "other": ["y"]}), mixed / "zz.parquet")
    cases = {
        ("input.path=" + str(artifact),): "is a key-token artifact's folder, not a corpus",
        ("input.path=" + str(mixed),): "zz.parquet has the columns doc, other, not those of",
        ("input.path=" + str(empty),): "no corpus shards there",
        ("input.text_key=content",): "input.text_key=content: "
        + str(corpus / "part-0.parquet")
        + " has no such column",
        ("input.path=" + str(tmp_path / "nowhere"),): "no such file or folder",
        ("input.path=" + str(curated.with_suffix(".parquet")),): "already has the column longppl_ppl",
        ("output_dir=" + str(foreign),): "a folder `make curate` did not make",
        ("tasks=2", "workers=3"): "workers=3 is more than tasks=2",
    }
    for extra, expected in cases.items():
        done = run_cmd(curate_command(tiny_model_dir, corpus, tmp_path / "out", *extra))
        lines = error_lines(done.stderr)
        assert done.returncode == 2 and len(lines) == 1 and expected in lines[0], (extra, done.stderr[-1500:])
        assert "Loading weights" not in done.stderr and not (tmp_path / "out" / "data").exists()


def test_bad_selection_is_one_line(tiny_model_dir, corpus, tmp_path):
    out = tmp_path / "curated"
    assert run_cmd(curate_command(tiny_model_dir, corpus, out)).returncode == 0
    base = [
        sys.executable,
        "-m",
        "pipeline.commands.curate_select",
        f"input={out}",
        f"hydra.run.dir={tmp_path}/l",
    ]
    cases = {
        ("select.by=longppl_nope", "select.top=0.1"): "select.by=longppl_nope: no numeric column",
        ("select.top=1.5",): "select.top=1.5",
        ("select.top=0",): "select.top=0",
        ("select.top=0.1", "select.min=1"): "exactly one of select.top",
        ("select.by=longppl_ppl",): "exactly one of select.top",
        (f"input={tmp_path}", "select.top=0.1"): "is not a finished curation",
    }
    for extra, expected in cases.items():
        done = run_cmd([*base, f"output_dir={tmp_path / 'sel'}", *extra])
        lines = error_lines(done.stderr)
        assert done.returncode == 2 and len(lines) == 1 and expected in lines[0], (extra, done.stderr[-1500:])
        assert not (tmp_path / "sel" / "data").exists()
    (out / "data" / "train-00000-of-00001.parquet").rename(out / "data" / "other.parquet")
    done = run_cmd([*base, f"output_dir={tmp_path / 'sel'}", "select.top=0.5"])
    assert done.returncode == 2 and "train-00000-of-00001.parquet is missing" in error_lines(done.stderr)[0]
