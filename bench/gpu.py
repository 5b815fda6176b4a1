"""`make bench-gpu`: the paper's shapes on one GPU, every contender in the same run, offline.

``build`` makes, under ``--work`` (artifacts/bench/gpu), a random-weight evaluator of Llama-3.1-8B's exact shape (built from
its config on the GPU, bfloat16, saved once) and a copy of ``emozilla/govreport-test-tokenized`` in its
format whose texts exceed ``--tokens`` reference tokens (the shipped sample's reports joined;
``studies.rehearse_paper.build_dataset``). ``measure`` then runs, each alone in its own process
(``bench.gpu_child``, measured by ``bench.runner``), on the same texts:

- stage 1, ``preset=paper`` (K=4096, d=1024, bfloat16, float32 head), against the official
  ``find_key_token`` (bfloat16, K=4096, d=1024);
- stage 2 (``make score``, bfloat16, ``add_bos=false``) against a plain bfloat16 forward with a float32
  cross-entropy;
- with ``--float32``, stage 1 in float32 on one text, TF32 off and on.

Per contender: the first text's time, the steady time per text (the median after the first), the
fixed start-up (the process's wall time less the texts at the steady rate: one text's run minus a
steady text), where the time before the first text went, and the device's peak memory by NVML.
``bench.gpu_report`` renders ``docs/reports/benchmarks-gpu.md`` from the measurements' JSON files (and
those of ``bench.numerics`` and ``bench.gpu_levers``).

    python -m bench.gpu build --texts 3 --tokens 32767
    python -m bench.gpu measure --texts 3 --tokens 32767 --float32 --json gpu-32k.json
    python -m bench.gpu_report gpu-32k.json gpu-128k.json numerics.json levers.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
from pathlib import Path

from bench import runner, shared
from bench.gpu_child import WORK, before_first_text, command_line, paper_overrides, paths, read_events
from pipeline.errors import ArgumentParser
from studies import random_models as random_weights
from studies.random_models import LLAMA3_ROPE, LLAMA31_SHAPES

SHAPES = LLAMA31_SHAPES


def build(work: Path, texts: int, tokens: int, shape: str, device: str, tokenizer: Path | None) -> dict:
    """The evaluator (once per work folder) and the dataset of ``texts`` rows above ``tokens``."""
    from transformers import AutoTokenizer

    from studies.rehearse_paper import build_dataset, embedded_tokenizer

    p, record = paths(work, tokens), {"tokenizer": shared.relative(work / "tokenizer")}
    with runner.Clock() as clock:
        if not (p["tokenizer"] / "tokenizer_config.json").exists():
            if tokenizer is None:
                embedded_tokenizer("smollm2-135m", p["tokenizer"])
            else:
                AutoTokenizer.from_pretrained(tokenizer).save_pretrained(p["tokenizer"])
        reference = AutoTokenizer.from_pretrained(p["tokenizer"])
        if not p["dataset"].exists():
            rows = build_dataset(p["dataset"], reference, texts, repeat=1 + tokens // 65536)
            record["dataset_lengths"] = [r["tokenized_len"] for r in rows]
        if not (p["model"] / "config.json").exists():
            record["parameters"] = save_random_model(p["model"], SHAPES[shape], reference, device)
    return record | {"seconds": round(clock.seconds, 1)}


def save_random_model(out: Path, shape: dict, tokenizer, device: str) -> int:
    """A random-weight Llama-3.1-shaped causal LM (its 128k rope scaling too), initialised on
    ``device`` in bfloat16 and saved with its tokenizer; returns its parameter count."""
    import torch

    config = random_weights.config(
        "llama", max_position_embeddings=131072, rope_parameters=LLAMA3_ROPE, **shape
    )
    config.bos_token_id, config.eos_token_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    model = random_weights.random_model(config, dtype=torch.bfloat16, device=device)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def contenders(
    work: Path,
    texts: int,
    tokens: int,
    device: str,
    extra: list[str],
    float32: bool,
    compile: bool = False,
) -> list[dict]:
    """Each contender's name, what it is measured against, its command (``bench.gpu_child``), what it
    starts without (stage 1's artifact: a finished one would be left untouched, nothing measured; a
    compiled one's cold cache) and, for a compiled one, its environment (the compile cache)."""
    p, overrides = paths(work, tokens), paper_overrides(work, tokens, texts, device, extra)
    name, stage1 = f"paper{tokens}x{texts}", overrides["stage1"]
    artifact = p["keytokens"] / name
    plain = ["--model", str(p["model"]), "--artifact", str(artifact), "--device", device]
    runs = [
        {
            "name": "stage 1 (ours)",
            "child": ["stage1", *stage1, f"corpus.limit={texts}", f"name={name}"],
            "fresh": [artifact],
        },
        {"name": "find_key_token (official)", "against": "stage 1 (ours)", "child": ["official", *plain]},
        {"name": "stage 2 (ours)", "child": ["stage2", *overrides["stage2"]]},
        {"name": "plain forward + float32 CE", "against": "stage 2 (ours)", "child": ["plain", *plain]},
    ]
    if float32:  # TF32 off and on; on, with attention on the math backend in query blocks (before 88746e2)
        for label, flags in (
            ("TF32 off", []),
            ("TF32 on", ["--tf32"]),
            ("TF32 on, math attention", ["--tf32", "--sdpa-math"]),
        ):
            tag = f"paper{tokens}x1-float32-{shared.slug(label)}"
            child = ["stage1", *stage1, "dtype=float32", "corpus.limit=1", f"name={tag}"]
            runs.append({"name": f"stage 1 float32, {label}, 1 text", "child": [*child, *flags],
                         "fresh": [p["keytokens"] / tag]})  # fmt: skip
        tag = f"paper{tokens}x1-float16"
        child = ["stage1", *stage1, "dtype=float16", "corpus.limit=1", f"name={tag}"]
        runs.append(
            {"name": "stage 1 float16, float32 head, 1 text", "child": child, "fresh": [p["keytokens"] / tag]}
        )
    return runs + (compiled(work, texts, tokens, overrides) if compile else [])


def compiled(work: Path, texts: int, tokens: int, overrides: dict) -> list[dict]:
    """Stage 1 with ``compile=on`` (the pipeline's setting: each decoder layer under ``torch.compile``),
    first with an empty compile cache (it compiles), then again with the cache the first filled (what a
    second run pays); stage 2 likewise, after them. Each is compared with what its uncompiled stage is
    (``versus``), on the same texts. The cache is the work folder's (``TORCHINDUCTOR_CACHE_DIR``, which
    the pipeline takes over its cache folder's)."""
    p = paths(work, tokens)
    cache = {"TORCHINDUCTOR_CACHE_DIR": str(p["compile_cache"])}
    runs = []
    for label, cold in (("cold compile cache", True), ("warm compile cache", False)):
        name = f"paper{tokens}x{texts}-compiled-{'cold' if cold else 'warm'}"
        child = ["stage1", *overrides["stage1"], f"corpus.limit={texts}", f"name={name}", "compile=on"]
        runs.append({"name": f"stage 1 compiled (ours), {label}", "versus": "find_key_token (official)",
                     "child": child, "env": cache, "fresh": [p["keytokens"] / name] + ([p["compile_cache"]] if cold else [])})  # fmt: skip
    child = ["stage2", *overrides["stage2"], "compile=on"]
    runs.append({"name": "stage 2 compiled (ours), warm compile cache", "versus": "plain forward + float32 CE",
                 "child": child, "env": cache, "fresh": []})  # fmt: skip
    return runs


def command(
    name: str,
    tokens: int,
    work: str,
    texts: int,
    device: str,
    overrides: list,
    float32: bool,
    compile: bool = False,
) -> tuple[list, dict]:
    """The command of contender ``name`` (``bench.gpu_child``), its phase records to ``events_file``, and
    its environment; what it must start without (stage 1's artifact, a cold compile cache) removed."""
    found = contenders(Path(work), texts, tokens, device, overrides, float32, compile)
    (run,) = [r for r in found if r["name"] == name]
    for path in run.get("fresh", []):
        shutil.rmtree(path, ignore_errors=True)
    return command_line(run["child"][0], events_file(Path(work), name, tokens), run["child"][1:]), run.get(
        "env", {}
    )


def events_file(work: Path, name: str, tokens: int) -> Path:
    return paths(work, tokens)["events"] / f"{shared.slug(name)}-{tokens}.jsonl"


CASE = runner.Case(
    "gpu",
    contenders=tuple(r["name"] for r in contenders(WORK, 3, 32767, "cuda", [], True, True)),
    sizes=(32767, 131071),
    command=command,
    device_memory=True,
)


def measure(args: argparse.Namespace) -> dict:
    """Every contender alone, one after another, within ``--budget`` seconds in all."""
    p = paths(args.work, args.tokens)
    p["events"].mkdir(parents=True, exist_ok=True)
    runs = contenders(
        args.work, args.texts, args.tokens, args.device, args.overrides, args.float32, args.compile
    )
    runs = [r for r in runs if not args.only or r["name"].split(" (")[0] in args.only]
    options = {"work": str(args.work), "texts": args.texts, "device": args.device}
    options |= {"overrides": args.overrides, "float32": args.float32, "compile": args.compile}
    rows = runner.run(CASE, contenders=[r["name"] for r in runs], sizes=[args.tokens], options=options,
                      budget=args.budget, logs=p["events"])  # fmt: skip
    results = []
    for run, row in zip(runs, rows, strict=True):
        record = {k: run[k] for k in ("name", "against", "versus") if k in run} | contender_record(row)
        if "skipped" not in row:
            record |= summarise(read_events(events_file(args.work, run["name"], args.tokens)))
        results.append(record)
        print(json.dumps({k: v for k, v in record.items() if k != "error"}), flush=True)
        if "error" in record:
            print(record["error"], flush=True)
    return {"bench": "gpu_paper", "tokens": args.tokens, "texts": args.texts, "machine": runner.machine(),
            "runs": results, "compiled_against_eager": against_eager(p["keytokens"], args.tokens, args.texts)}  # fmt: skip


def against_eager(keytokens: Path, tokens: int, texts: int) -> list[dict]:
    """Each compiled stage-1 artifact against the eager one of the same run: the key tokens' Jaccard index
    (None where neither has a key token: random weights rarely give one) and the largest differences."""
    from pipeline.artifact.identity import compare_tables
    from pipeline.artifact.reader import open_artifact

    eager = keytokens / f"paper{tokens}x{texts}"
    found = []
    for cache in ("cold", "warm"):
        compiled = keytokens / f"paper{tokens}x{texts}-compiled-{cache}"
        if (eager / "manifest.json").is_file() and (compiled / "manifest.json").is_file():
            base, other = open_artifact(eager), open_artifact(compiled)
            columns = compare_tables(base, other)["columns"]
            found.append({"compile cache": cache, "key_tokens_jaccard": shared.key_jaccard(base, other),
                          **{f"max_abs_{name}": q["max"] for name, q in columns.items()}})  # fmt: skip
    return found


def contender_record(row: dict) -> dict:
    """The runner's row as the report reads it: wall time, device peak above the start (NVML) or the
    process tree's peak, exit status and the end of the log of a failed run."""
    if "skipped" in row:
        return {"skipped": row["skipped"]}
    process, nvml = row["process"], row["process"]["memory"].startswith("nvml")
    record = {
        "returncode": process["returncode"],
        "wall_s": round(process["seconds"], 3),
        "peak_gib": round((process["above_start_bytes"] if nvml else process["peak_bytes"]) / shared.GIB, 3),
        "base_gib": round(process["start_bytes"] / shared.GIB, 3) if nvml else 0.0,
        "memory_measure": "nvml (device memory in use, CUDA context included)"
        if nvml
        else "process tree RSS",
    }
    if "failed" in row:
        record["error"] = row["failed"]
    return record


def summarise(events: list[dict]) -> dict:
    """Per-text times and where the time before the first text went, from a child's phase records."""
    texts = [e["end"] - e["start"] for e in events if e["phase"] == "text"]
    out: dict = {"text_s": [round(t, 3) for t in texts]}
    if not texts:
        return out
    out["first_text_s"] = round(texts[0], 3)
    out["steady_text_s"] = round(statistics.median(texts[1:]), 3) if len(texts) > 1 else None
    out |= before_first_text(events)
    peak = [e["bytes"] for e in events if e["phase"] == "torch peak"]
    if peak:
        out["torch_peak_gib"] = round(peak[0] / 2**30, 3)
    compiled = [{k: v for k, v in e.items() if k != "phase"} for e in events if e["phase"] == "compile"]
    if compiled:
        out["compile"] = compiled[0]
    return out


def startup(run: dict) -> float | None:
    """One text's run minus a steady text: the wall time less every text at the steady rate."""
    steady = run.get("steady_text_s") or run.get("first_text_s")
    if steady is None or "wall_s" not in run:
        return None
    return run["wall_s"] - len(run["text_s"]) * steady


def fmt(value, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def paper_section(result: dict) -> list[str]:
    """One measurement's table: each contender, and the ratios to what it is measured against."""
    m = result["machine"]
    lines = [
        f"## {result['tokens']:,} tokens per text, {result['texts']} texts",
        "",
        f"{m.get('gpu', 'no GPU')} ({m.get('gpu_memory_gib', '?')} GiB, driver {m.get('driver', '?')}, CUDA "
        f"{m.get('cuda', '?')}), torch {m['torch']}, transformers {m['transformers']}, longppl "
        f"{m.get('longppl')}, {m['cpus']} CPUs, commit {m.get('commit')}, {m['date']}.",
        "",
        "| contender | texts | first text s | steady s/text | start-up s | wall s | device peak GiB | torch peak GiB | ours against theirs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    baseline = {r.get("against"): r for r in result["runs"] if r.get("against")}  # ours -> theirs
    by_name = {r["name"]: r for r in result["runs"]}
    baseline |= {r["name"]: by_name[r["versus"]] for r in result["runs"] if r.get("versus") in by_name}
    for r in result["runs"]:
        if "skipped" in r or r.get("returncode"):
            why = r.get("skipped") or "failed: " + r.get("error", "").strip().splitlines()[-1][:160]
            lines.append(f"| {r['name']} | | | | | | | | {why} |")
            continue
        lines.append(
            f"| {r['name']} | {len(r['text_s'])} | {fmt(r.get('first_text_s'))} | {fmt(r.get('steady_text_s'))} "
            f"| {fmt(startup(r), 1)} | {fmt(r['wall_s'], 1)} | {fmt(r['peak_gib'], 1)} | {fmt(r.get('torch_peak_gib'), 1)} "
            f"| {versus(r, baseline.get(r['name']))} |"
        )
    facts = [f"- {r['name']}: {json.dumps(r['compile'])}" for r in result["runs"] if r.get("compile")]
    lines += ["", "torch.compile (its options, and what it compiled):", "", *facts] if facts else []
    versus_eager = [f"- {json.dumps(c)}" for c in result.get("compiled_against_eager", [])]
    lines += (
        ["", "Compiled stage 1's artifacts against the eager one:", "", *versus_eager] if versus_eager else []
    )
    lines += ["", "Before the first text (seconds, from the process's start):", ""]
    for r in result["runs"]:
        if r.get("phases_s"):
            parts = ", ".join(f"{k} {v:.1f}" for k, v in r["phases_s"].items() if k != "process")
            lines.append(
                f"- {r['name']}: {fmt(r.get('before_first_text_s'), 1)} s before its first text; {parts}"
            )
    return [*lines, ""]


def versus(run: dict, other: dict | None) -> str:
    """Ratios of the steady time per text and of the device peak: this contender (ours) / the one
    measured against it (the official code, a plain forward)."""
    if not (other and run.get("text_s") and other.get("text_s")) or other.get("returncode"):
        return ""  # either skipped, failed or measured no text (nothing to compare)
    time_ratio = (run.get("steady_text_s") or run["first_text_s"]) / (
        other.get("steady_text_s") or other["first_text_s"]
    )
    return f"{time_ratio:.2f}x the time, {run['peak_gib'] / other['peak_gib']:.2f}x the memory of {other['name']}"


def main() -> None:
    parser = ArgumentParser(prog=shared.program(), description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    for step in ("build", "measure", "all"):
        s = sub.add_parser(step)
        s.add_argument("--work", type=Path, default=WORK)
        s.add_argument("--texts", type=shared.whole(1), default=3)
        s.add_argument("--tokens", type=shared.whole(2), default=32767)
        s.add_argument("--device", default="cuda")
        s.add_argument("--shape", choices=sorted(SHAPES), default="llama3.1-8b")
        s.add_argument(
            "--tokenizer", type=shared.existing, help="a saved tokenizer (default: the embedded SmolLM2's)"
        )
        s.add_argument(
            "--float32", action="store_true", help="stage 1 in float32 on one text, TF32 off and on"
        )
        s.add_argument(
            "--budget", type=shared.above(0), default=3600, help="seconds for every contender together"
        )
        s.add_argument(
            "--json",
            type=shared.output_file,
            help="where the measurement goes (default: <work>/gpu-<tokens>.json)",
        )
        s.add_argument(
            "--only", nargs="*", help="contenders by name: 'stage 1' 'find_key_token' 'stage 2' ..."
        )
        s.add_argument("--overrides", nargs="*", default=[], help="more key=value for stage 1")
        s.add_argument(
            "--compile", action="store_true", help="add both stages with compile=on (cold, then warm cache)"
        )
    args = parser.parse_args()
    if args.step in ("build", "all"):
        print(
            json.dumps(build(args.work, args.texts, args.tokens, args.shape, args.device, args.tokenizer)),
            flush=True,
        )
    if args.step in ("measure", "all"):
        result = measure(args)
        path = args.json or args.work / f"gpu-{args.tokens}.json"
        path.write_text(json.dumps(result, indent=1))
        print("\n".join(paper_section(result)))
        print(
            f"written: {path}; render docs/reports/benchmarks-gpu.md with `python -m bench.gpu_report {path} ...`"
        )


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
