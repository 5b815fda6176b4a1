"""`make curate` at corpus scale on this machine (docs/reports/scale.md): a seeded corpus of documents of 512
to 4,096 tokens (``make_corpus``: one word is one token of the bench's word-level tokenizer, so the
lengths are exact), scored by a tiny random-weight evaluator (``studies.random_models``, float32).

Contenders, side by side in one run (each its own process, timed by the runner's clock):
- ``bare-loop``: the same scorer and column function (``CurationScorer.columns``) in a plain Python
  loop over the same rows, written as one Parquet file: what the engine adds is measured against it;
- ``curate-1-worker``: `longppl curate` with ``tasks=8 workers=1`` (every task in the launcher);
- ``curate-2-workers``: ``tasks=8 workers=2`` (each task its own process, two at once);
- ``curate-killed-resumed``: the same, one task's process killed by SIGKILL about halfway through its
  shard (when it has run half as long as the first finished task), then the same command again
  (``killed_and_resumed``: its record, ``killed.json`` in the output, says which tasks each run did and
  whether the shards finished before the kill were left as they were);
- ``io-1000-rows`` and ``io-100-rows``: no model; the reading and writing of a task of every document
  alone (``io_work``), the corpus read by the curation's reader and written back by its writer at 1,000
  rows a batch (datatrove's default) and at 100 (``BATCH_ROWS``): what the rows held by them add to a
  task's peak memory as its documents grow; ``io-100-rows-live`` the same at 100 with ``tracemalloc`` on,
  recording the live bytes of Python's heap and Arrow's pool at each quarter of the rows.

Each row counts the rows and distinct ids written, and each task's peak memory. The corpus's files have
row groups of ``ROW_GROUP`` rows at every size (a task holds one of its input's row groups at a time).

    make bench-curate                                  # 2,000 and 20,000 documents
    make bench-curate ARGS="--sizes 200 2000 --out docs/reports/scale-1000.json"
"""

from __future__ import annotations

import json
import os
import random
import sys
import tracemalloc
from pathlib import Path
from typing import Any

from bench import runner, shared

CONTENDERS = (
    "bare-loop", "curate-1-worker", "curate-2-workers", "curate-killed-resumed", "io-1000-rows", "io-100-rows",
    "io-100-rows-live",
)  # fmt: skip
ROW_GROUP = 250  # rows per row group of the corpus's files: a file of the 2,000-document corpus
WORDS = 500  # the tokenizer's words (its vocabulary: these, <s>, </s>)
SETTINGS = ["K=512", "d=512", "max_tokens=4096", "dtype=float32", "device=cpu", "progress=false"]


def make_model(folder: Path) -> Path:
    """A word-level tokenizer of ``WORDS`` words and a tiny random Llama of its vocabulary (seed 0)."""
    if (folder / "config.json").is_file():
        return folder
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from studies.random_models import random_model, tiny_config

    vocab = {"<s>": 0, "</s>": 1, **{f"w{i}": i + 2 for i in range(WORDS)}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="</s>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>")
    random_model(tiny_config("llama", len(vocab), max_positions=8192), seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def make_corpus(folder: Path, documents: int, seed: int = 0, shards: int = 8) -> Path:
    """``documents`` rows (id, text, source) of 512 to 4,096 words, uniform, seeded; ``shards`` files."""
    if folder.is_dir():
        return folder
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng, part = random.Random(seed), folder.with_suffix(".partial")
    part.mkdir(parents=True, exist_ok=True)
    rows = [
        {"id": f"doc-{i:06d}", "text": " ".join(f"w{rng.randrange(WORDS)}" for _ in range(rng.randint(512, 4096))),
         "source": f"s{i % 7}"}
        for i in range(documents)
    ]  # fmt: skip
    for s in range(shards):
        table = pa.Table.from_pylist(rows[s::shards])
        pq.write_table(table, part / f"part-{s:02d}.parquet", row_group_size=ROW_GROUP)
    part.rename(folder)
    return folder


def curate_args(model: Path, corpus: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "pipeline.commands.curate", "evaluator=local", f"evaluator.spec={model}",
        f"input.path={corpus}", f"output_dir={out}", *SETTINGS, *extra, f"hydra.run.dir={out}-logs",
    ]  # fmt: skip


def command(contender: str, size: int, root: str) -> list[str] | None:
    if contender.startswith("io-"):
        return None  # timed in the runner's child: ``io_work``
    base = Path(root)
    model, corpus = make_model(base / "model"), make_corpus(base / f"corpus-{size}", size)
    out = base / f"out-{contender}-{size}"
    if contender in ("bare-loop", "curate-killed-resumed"):
        mode = "--bare" if contender == "bare-loop" else "--killed"
        return [sys.executable, "-m", "bench.curate", mode, str(model), str(corpus), str(out)]
    workers = "1" if contender == "curate-1-worker" else "2"
    return curate_args(model, corpus, out, "tasks=8", f"workers={workers}")


def bare_loop(model: str, corpus: str, out: str) -> None:
    """The rows scored by the same scorer and column function in a plain loop, then written."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datatrove.data import Document as Row
    from hydra import compose, initialize_config_dir

    from pipeline.commands.shell import plain
    from pipeline.jobs.curate import CurateJob
    from pipeline.keytokens.curation import CurationScorer
    from pipeline.models.logprobs import scorer_for

    args = curate_args(Path(model), Path(corpus), Path(out))[3:-1]
    with initialize_config_dir(config_dir=str(Path(__file__).parents[1] / "conf"), version_base=None):
        job = CurateJob.from_config(plain(compose("curate", overrides=args)))
    step = CurationScorer(job, 0)
    lm, compute = step.evaluator()
    scorer = scorer_for(lm, compute)
    written = []
    for path in sorted(Path(corpus).glob("*.parquet")):
        for record in pq.read_table(path).to_pylist():
            row = Row(text=record.pop("text"), id=record.pop("id"), metadata=record)
            written.append(
                {"text": row.text, "id": row.id, **record, **step.columns(row, lm, scorer, lm.bos_token_id)}
            )
    Path(out).mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(written), Path(out) / "bare.parquet")


def killed_and_resumed(model: str, corpus: str, out: str) -> None:
    """8 tasks on 2 workers, one task's process killed (SIGKILL) about halfway through its shard, then the
    same command again; ``killed.json`` in ``out`` records what each run did."""
    cmd, folder = curate_args(Path(model), Path(corpus), Path(out), "tasks=8", "workers=2"), Path(out)
    first = runner.start(cmd)
    killed = kill_halfway(folder / ".datatrove", first)
    errors = [line for line in stderr_lines(first) if line.startswith("error:")]
    before = {p.name: shard_state(p) for p in sorted(folder.glob("data/*.parquet"))}
    ran_first = task_pids(folder)
    again = runner.start(cmd)
    again_errors = stderr_lines(again)
    ran_again = task_pids(folder)
    record = {
        "killed": killed, "first_returncode": first.returncode, "first_errors": errors,
        "shards_before_rerun": sorted(before),
        "shards_untouched": all(shard_state(folder / "data" / name) == s for name, s in before.items()),
        "tasks_finished_first": sorted(ran_first), "tasks_run_again": sorted(
            t for t, pid in ran_again.items() if ran_first.get(t) != pid),
        "rerun_returncode": again.returncode, "rerun_errors": again_errors[-3:] if again.returncode else [],
    }  # fmt: skip
    (folder / "killed.json").write_text(json.dumps(record, indent=1) + "\n")


def stderr_lines(proc: Any) -> list[str]:
    """A finished process's error stream, its paths as records hold them (relative to the repository)."""
    return proc.communicate()[1].replace(f"{shared.ROOT}/", "").splitlines()


def kill_halfway(engine: Path, proc: Any) -> dict:
    """SIGKILL to the first task that started after a task finished, once it has run half as long as that
    task took (the tasks running when the first one finished are past their middle)."""
    import signal
    import time

    late: set[str] | None = None  # the tasks running when the first task finished: not candidates
    while proc.poll() is None:
        took = [json.loads(p.read_text())["seconds"] for p in engine.glob("tasks/*.json")]
        running = {p.stem: p for p in sorted(engine.glob("running/*.json"))}
        if took and late is None:
            late = set(running)
        for task, path in running.items() if took else ():
            state = json.loads(path.read_text())
            ran = time.time() - state["since"]
            if task not in late and not (engine / "tasks" / f"{task}.json").exists() and ran >= min(took) / 2:
                os.kill(state["pid"], signal.SIGKILL)
                return {"task": int(task), "after_s": round(ran, 1), "finished_task_s": min(took)}
        time.sleep(0.5)
    return {}


def shard_state(path: Path) -> list:
    """A shard as it lies: inode, modification time, size and SHA-256 (unchanged: not written again)."""
    import hashlib

    st = path.stat()
    return [st.st_ino, st.st_mtime_ns, st.st_size, hashlib.sha256(path.read_bytes()).hexdigest()]


def task_pids(folder: Path) -> dict[int, int]:
    """Each finished task's process (its record under .datatrove/tasks)."""
    return {int(p.stem): json.loads(p.read_text())["pid"] for p in folder.glob(".datatrove/tasks/*.json")}


def io_work(contender: str, size: int, root: str) -> Any:
    """The reading and writing of one task of every document at the contender's rows a batch."""
    import tempfile

    import pyarrow.parquet as pq

    from pipeline.artifact.columns import COLUMNS
    from pipeline.keytokens.curation import inspect_corpus, shard_writer

    corpus = inspect_corpus(str(make_corpus(Path(root) / f"corpus-{size}", size)), "parquet", "text", "id")
    batch, live = int(contender.split("-")[1]), contender.endswith("-live")

    def work() -> dict:
        seen: list[list[int]] = []
        if live:
            tracemalloc.start()
        with tempfile.TemporaryDirectory() as out:
            writer = shard_writer(corpus, Path(out), 1, batch_rows=batch)
            rows = corpus.reader(by_rows=False, batch_rows=batch).run(rank=0, world_size=1)
            for _ in writer.run(
                scored(rows, COLUMNS, size // 4, seen if live else None), rank=0, world_size=1
            ):
                pass  # each row let go once written, as FinishShard does
            written = pq.ParquetFile(next(Path(out).glob("data/*"))).metadata
        tracemalloc.stop()
        found = {"rows": written.num_rows, "row_groups": written.num_row_groups}
        return found | ({"live_rows_arrow_python_bytes": seen} if live else {})

    return work


def scored(rows: Any, columns: list[str], every: int, seen: list | None) -> Any:
    """The rows given the longppl_* columns (zeros); with ``seen``, the live bytes of Arrow's pool and
    Python's heap (``tracemalloc``) recorded every ``every`` rows."""
    import pyarrow as pa

    for i, row in enumerate(rows, 1):
        row.metadata |= dict.fromkeys(columns, 0)
        yield row
        if seen is not None and i % every == 0:
            seen.append([i, pa.total_allocated_bytes(), tracemalloc.get_traced_memory()[0]])


def outcome(out: Path) -> dict:
    """What a contender wrote: rows, distinct ids, token range, each task's peak memory."""
    import polars as pl

    files = sorted(out.glob("data/*.parquet")) or sorted(out.glob("*.parquet"))
    if not files:
        return {}
    rows = pl.read_parquet(files, columns=["id", "longppl_tokens"])
    tasks = [json.loads(p.read_text()) for p in sorted(out.glob(".datatrove/tasks/*.json"))]
    found = {"rows": rows.height, "ids": rows["id"].n_unique(), "tokens": int(rows["longppl_tokens"].sum())}
    found |= {
        "min_tokens": int(rows["longppl_tokens"].min()),
        "max_tokens": int(rows["longppl_tokens"].max()),
    }
    found["task_peak_rss_mb"] = [t.get("peak_rss_mb") for t in tasks]
    if (out / "killed.json").is_file():
        found["killed_and_resumed"] = json.loads((out / "killed.json").read_text())
    return found


def main() -> None:
    parser = shared.arguments(__doc__)
    parser.add_argument("--sizes", nargs="+", type=shared.whole(1), default=[2000, 20000])
    parser.add_argument("--dir", type=Path, default=Path("artifacts/bench/curate"))
    parser.add_argument("--out", type=shared.output_file, help="the raw rows as JSON (default: print)")
    parser.add_argument("--contenders", nargs="*", default=list(CONTENDERS), choices=CONTENDERS)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    rows = runner.run(
        CASE, contenders=args.contenders, sizes=args.sizes, options={"root": str(args.dir.absolute())}
    )
    for row in rows:
        row["outcome"] = outcome(args.dir.absolute() / f"out-{row['contender']}-{row['size']}")
    result = {"machine": runner.machine(), "stamp": runner.stamp(), "rows": rows}
    text = json.dumps(result, indent=1, default=str)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


CASE = runner.Case("curate", contenders=CONTENDERS, sizes=(2000, 20000), command=command, setup=io_work)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--bare"]:
        bare_loop(*sys.argv[2:5])
    elif sys.argv[1:2] == ["--killed"]:
        killed_and_resumed(*sys.argv[2:5])
    elif not runner.child(CASE):
        main()
