"""`make bench-startup`: each stage's start-up, phase by phase: from the process's start to the first
text's computation, wall and CPU seconds, over several runs (medians).

Each run is the project's own command in its own process (``bench.gpu_child stage1`` / ``stage2``: `make
keytokens` / `make score` with their functions timed as phases), stopped as its first text's computation
starts (``--until-first-text``: nothing after it runs, no artifact is finished, no results line written).
The sizes:

- ``embedded``: the defaults of `make keytokens` (the embedded Gemma 3 270M as the evaluator) and of
  `make score` (SmolLM2-135M on the default artifact), on ``--device`` (the CPU by default);
- ``paper``: the paper's shapes of `make bench-gpu` (its work folder's Llama-3.1-8B-shaped evaluator,
  ``preset=paper``; stage 2 against the artifact its stage 1 wrote), after ``bench.gpu build`` and
  ``measure``.

On a shared machine the wall times move with the load; the CPU seconds (every thread of the process)
move less: both are recorded, with the load average before and after.

With ``--imports``: each stage's command's imports against the official code's (``import longppl`` and
transformers' ``AutoModelForCausalLM``), each in a fresh ``python -c`` process ``--runs`` times (wall and
CPU seconds of the whole process, medians), also with the model code a Llama load imports, and one
``python -X importtime`` run of each (its largest cumulative entries; the raw output beside the JSON).
``--budget``: seconds for every run together (a run past it is skipped, what was measured is kept).

    python -m bench.startup --runs 5 --json artifacts/bench/startup/startup.json
    python -m bench.startup --sizes paper --device cuda --tokens 32767 --texts 2 --runs 3 --budget 150
    python -m bench.startup --imports --runs 5 --json artifacts/bench/startup/imports.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from pathlib import Path

from bench import runner, shared
from bench.gpu_child import WORK, before_first_text, command_line, paper_overrides, read_events

STAGES = {"stage 1 (make keytokens)": "stage1", "stage 2 (make score)": "stage2"}
HERE = Path("artifacts/bench/startup")  # the runs' artifacts, results lines and phase records


def overrides(
    stage: str, size: str, device: str, work: str, tokens: int, texts: int, extra: dict, here: Path
) -> list:
    """The command's overrides: the defaults (``embedded``) or the paper's shapes (``paper``), then
    ``extra[stage]``."""
    if size == "paper":
        return paper_overrides(Path(work), tokens, texts, device, [])[stage] + extra[stage]
    if stage == "stage1":
        return [f"output_dir={here / 'keytokens'}", "progress=false", f"device={device}", *extra[stage]]
    return [f"artifact={shared.default_artifact()}", f"results={here / 'scores.jsonl'}", "progress=false",
            f"device={device}", *extra[stage]]  # fmt: skip


def events_file(here: Path, contender: str, size: str) -> Path:
    return here / "events" / f"{shared.slug(contender)}-{size}.jsonl"


def command(
    contender: str,
    size: str,
    device: str,
    work: str,
    tokens: int,
    texts: int,
    extra: dict,
    threads: int | None,
    here: str = str(HERE),
) -> tuple[list, dict]:
    """The contender's command line (its stage, stopped at its first text; phase records appended) and
    its environment (``threads``: OMP_NUM_THREADS)."""
    stage = STAGES[contender]
    events = events_file(Path(here), contender, size)
    events.parent.mkdir(parents=True, exist_ok=True)
    args = ["--until-first-text", *overrides(stage, size, device, work, tokens, texts, extra, Path(here))]
    return command_line(stage, events, args), ({"OMP_NUM_THREADS": str(threads)} if threads else {})


CASE = runner.Case("startup", contenders=tuple(STAGES), sizes=("embedded", "paper"), command=command)

LLAMA = "transformers.models.llama.modeling_llama"  # the model code a Llama checkpoint's load imports
IMPORTS = {  # what each side imports before its model loads, and with the model code a load adds
    "official: import longppl, AutoModelForCausalLM": "import longppl.longppl; from transformers import AutoModelForCausalLM",
    "stage 1: longppl keytokens": "import pipeline.commands.keytokens",
    "stage 2: longppl score": "import pipeline.commands.score",
    "official, with a Llama's model code": f"import longppl.longppl; from transformers import AutoModelForCausalLM; import {LLAMA}",
    "stage 1, with a Llama's model code": f"import pipeline.commands.keytokens, pipeline.models.attention, {LLAMA}",
    "stage 2, with a Llama's model code": f"import pipeline.commands.score, pipeline.models.attention, {LLAMA}",
}  # fmt: skip


def import_command(contender: str, size: str, importtime: bool = False) -> list[str]:
    """``python -c`` of the contender's imports (``-X importtime``: each module's import time on stderr)."""
    return [sys.executable, *(["-X", "importtime"] if importtime else []), "-c", IMPORTS[contender]]


IMPORT_CASE = runner.Case("startup", contenders=tuple(IMPORTS), sizes=("imports",), command=import_command)


def heaviest(log: Path, top: int = 8, depth: int = 3) -> list[list]:
    """The largest cumulative entries of a ``-X importtime`` output down to ``depth`` levels of nesting:
    [seconds, level, module], largest first."""
    entries = []
    for line in log.read_text().splitlines():
        found = re.match(r"import time:\s+\d+ \|\s+(\d+) \| ( *)(\S+)", line)
        if found and len(found[2]) // 2 < depth:
            entries.append([round(int(found[1]) / 1e6, 3), len(found[2]) // 2, found[3]])
    return sorted(entries, reverse=True)[:top]


def measure_imports(args: argparse.Namespace) -> dict:
    """Each contender's imports ``--runs`` times (medians), then once under ``-X importtime``."""
    load_before = os.getloadavg()
    rows = runner.run(IMPORT_CASE, repeats=args.runs, budget=args.budget)
    logs = args.json.parent / "importtime"
    logs.mkdir(parents=True, exist_ok=True)
    results = []
    for row in rows:
        log = logs / f"{shared.slug(row['contender'])}.txt"
        runner.run_process(import_command(row["contender"], "imports", importtime=True), log=log)
        record = {"contender": row["contender"], "imports": IMPORTS[row["contender"]],
                  "importtime": shared.relative(log), "heaviest": heaviest(log)}  # fmt: skip
        if "work" in row:
            record |= {"wall_s": round(row["work"]["seconds"], 3), "cpu_s": round(row["work"]["cpu_s"], 3),
                       "runs": row["work"]["runs"]}  # fmt: skip
        results.append(record | ({"error": row["failed"]} if "failed" in row else {}))
    load = [round(x, 2) for x in (*load_before, *os.getloadavg())]
    return {"bench": "startup_imports", "machine": runner.machine(), "load_average_before_after": load,
            "runs": args.runs, "results": results}  # fmt: skip


def machine_line(result: dict, how: str) -> str:
    """The line above a table: the machine, the commit and date, ``how`` the runs ran, the load."""
    m = result["machine"]
    return (
        f"{m.get('gpu', 'CPU only')}, {m['cpus']} CPUs, torch {m['torch']}, transformers {m['transformers']}, "
        f"commit {m.get('commit')}, {m['date']}; {how}; load average (1, 5, 15 min) before and after: "
        f"{result['load_average_before_after']}"
    )


def imports_table(result: dict) -> list[str]:
    """Each contender's imports, wall and CPU seconds (medians), and where ``-X importtime`` puts them."""
    lines = [
        machine_line(result, f"{result['runs']} runs each, medians"),
        "",
        "| imports | wall s | CPU s | largest under `-X importtime` (cumulative s) |",
        "|---|---:|---:|---|",
    ]
    for r in result["results"]:
        top = ", ".join(f"{name} {seconds}" for seconds, level, name in r["heaviest"][:5] if level <= 2)
        lines.append(
            f"| {r['contender']} | {r.get('wall_s', '')} | {r.get('cpu_s', r.get('error', ''))} | {top} |"
        )
    return lines


def runs_of(events: list[dict]) -> list[list[dict]]:
    """One process's records per run (each run starts with its ``process`` record)."""
    runs: list[list[dict]] = []
    for e in events:
        if e["phase"] == "process":
            runs.append([])
        if runs:
            runs[-1].append(e)
    return runs


def medians(runs: list[dict]) -> dict:
    """The median of each number over the runs that reached their first text."""
    done = [r for r in runs if "before_first_text_s" in r]
    out: dict = {"runs": len(runs), "reached_first_text": len(done)}
    for key in ("before_first_text_s", "before_first_text_cpu_s"):
        values = [r[key] for r in done if key in r]
        out[key] = round(statistics.median(values), 3) if values else None
    for key in ("phases_s", "phases_cpu_s"):
        names = dict.fromkeys(n for r in done for n in r.get(key, {}))
        out[key] = {n: round(statistics.median(r[key].get(n, 0.0) for r in done), 3) for n in names}
    return out


def measure(args: argparse.Namespace) -> dict:
    """Every (stage, size) ``--runs`` times, each run's phases, and their medians."""
    options = {"device": args.device, "work": str(args.work), "tokens": args.tokens, "texts": args.texts,
               "extra": {"stage1": args.overrides, "stage2": args.score_overrides}, "threads": args.threads,
               "here": str(args.dir)}  # fmt: skip
    for contender in STAGES:
        for size in args.sizes:
            events_file(args.dir, contender, size).unlink(missing_ok=True)
    load_before = os.getloadavg()
    rows = runner.run(CASE, sizes=args.sizes, options=options, repeats=args.runs, logs=args.dir / "events",
                      budget=args.budget)  # fmt: skip
    results = []
    for row in rows:
        events = read_events(events_file(args.dir, row["contender"], row["size"]))
        runs = [before_first_text(r) for r in runs_of(events)]
        record = {"stage": row["contender"], "size": row["size"], "runs": runs, "median": medians(runs)}
        if "failed" in row or "skipped" in row:
            record["error"] = row.get("failed") or row["skipped"]
        results.append(record)
    load = [round(x, 2) for x in (*load_before, *os.getloadavg())]
    return {"bench": "startup", "machine": runner.machine(), "load_average_before_after": load,
            "device": args.device, "threads": args.threads, "results": results}  # fmt: skip


def table(result: dict) -> list[str]:
    """Each stage's median start-up and its phases, wall and CPU seconds."""
    lines = [
        machine_line(result, f"OMP_NUM_THREADS {result.get('threads') or 'unset'}"),
        "",
        "| stage | size | runs | phase | wall s (median) | CPU s (median) |",
        "|---|---|---:|---|---:|---:|",
    ]
    for r in result["results"]:
        med = r["median"]
        head = f"| {r['stage']} | {r['size']} | {med['reached_first_text']}/{med['runs']} |"
        if r.get("error"):
            lines.append(f"{head} failed: {r['error'][:160]} | | |")
        lines.append(
            f"{head} **to the first text** | {med['before_first_text_s']} | {med['before_first_text_cpu_s']} |"
        )
        for name, wall in med["phases_s"].items():
            lines.append(f"{head} {name} | {wall} | {med['phases_cpu_s'].get(name, '')} |")
    return lines


def section(result: dict) -> list[str]:
    """The GPU report's section (``bench.gpu_report``)."""
    title = f"## Start-up to the first text, phase by phase ({result['device']}, medians)"
    return [
        title,
        "",
        "`python -m bench.startup` (run by `bash bench/gpu_machine.sh 1`).",
        "",
        *table(result),
        "",
    ]


def imports_section(result: dict) -> list[str]:
    """The GPU report's section of ``--imports`` (``bench.gpu_report``)."""
    return ["## Each stage's imports against the official code's", "",
            "`python -m bench.startup --imports` (run by `bash bench/gpu_machine.sh 1`).", "",
            *imports_table(result), ""]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = shared.arguments(__doc__)
    parser.add_argument("--runs", type=shared.whole(1), default=5, help="runs of each stage (medians)")
    parser.add_argument("--sizes", nargs="*", default=["embedded"], choices=CASE.sizes)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--work", type=Path, default=WORK, help="make bench-gpu's work folder (size paper)")
    parser.add_argument(
        "--tokens", type=shared.whole(2), default=32767, help="its texts' tokens (size paper)"
    )
    parser.add_argument(
        "--texts", type=shared.whole(1), default=2, help="its stage 1 run's texts (size paper)"
    )
    parser.add_argument("--overrides", nargs="*", default=[], help="more key=value for stage 1")
    parser.add_argument("--score-overrides", nargs="*", default=[], help="more key=value for stage 2")
    parser.add_argument(
        "--threads", type=shared.whole(1), help="OMP_NUM_THREADS of the runs (default: unset)"
    )
    parser.add_argument("--dir", type=Path, default=HERE, help="the runs' artifacts and phase records")
    parser.add_argument("--json", type=shared.output_file, default=HERE / "startup.json")
    parser.add_argument(
        "--budget",
        type=shared.above(0, inclusive=True),
        help="seconds for every run together (default: no limit)",
    )
    parser.add_argument(
        "--imports", action="store_true", help="each stage's imports against the official code's"
    )
    args = parser.parse_args(argv)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    result = measure_imports(args) if args.imports else measure(args)
    args.json.write_text(json.dumps(result, indent=1))
    print("\n".join(imports_table(result) if args.imports else table(result)))
    print(f"written: {args.json}")


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
