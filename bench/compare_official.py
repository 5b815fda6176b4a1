"""This project against the official `longppl` package (0.3.0) and plain perplexity, side by side.

Every measurement runs in its own subprocess, watched by the parent: its peak resident memory is
sampled every 50 ms and a run that passes the memory cap is killed and recorded as such, instead
of taking the machine down. Same documents, models, K, d, alpha, beta and dtype for both
implementations; the official conventions are used throughout (BOS on the evaluator's long pass
only, no special tokens for the evaluated model): `short_window_bos=false`, `add_bos=false`.

    make bench          # everything: 4k comparisons, stage 2, drop-in compute_longppl, scaling 1k-32k
    make bench-quick    # 4k only
    make bench-dropin   # the drop-in compute_longppl comparison only (its own section)
Writes its sections of docs/reports/benchmarks.md.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.compare_dropin import compare_dropin
from bench.harness import CHILD, ROOT, arguments, run_watched, stamp
from bench.report import publish

# ----------------------------------------------------------------------------------------------
# The parent: runs each job in a watched subprocess, compares, writes the report


@dataclass
class Jobs:
    """Runs jobs in watched subprocesses, with a cache (a crashed bench resumes) and a record of
    every comparison this project lost, for the summary."""

    cap_gb: float
    timeout: float
    cache: Path = ROOT / "artifacts/bench/jobs.jsonl"
    hits: list[str] = field(default_factory=list)  # jobs measured by an earlier run
    slower: list[str] = field(default_factory=list)

    def run(self, job: dict) -> dict:
        """One job's result: from the cache when it finished before, else measured and cached."""
        key = json.dumps({**job, "cap_gb": self.cap_gb}, sort_keys=True)
        if self.cache.is_file():
            for line in self.cache.read_text().splitlines():
                entry = json.loads(line)
                if entry["key"] == key:
                    self.hits.append(job["task"])
                    return entry["result"]
        cmd = [sys.executable, "-m", "bench.compare_tasks", CHILD, json.dumps(job)]
        result = run_watched(cmd, self.cap_gb, self.timeout)
        self.cache.parent.mkdir(parents=True, exist_ok=True)
        with self.cache.open("a") as handle:
            handle.write(json.dumps({"key": key, "result": result}) + "\n")
        outcome = result.get("failed") or f"{result['seconds']:.1f} s, {result['process_peak_gb']:.2f} GB"
        print(
            f"{job['task']} {job['tokens']} tokens (doc {job.get('doc')}): {outcome}",
            file=sys.stderr,
            flush=True,
        )
        return result

    def lost(self, what: str, ours: float, theirs: float) -> None:
        if ours > theirs:
            self.slower.append(f"{what} ({ours / theirs:.2f})")


def token_diffs(ours: dict, official_spans: list) -> list[dict]:
    """Evaluator tokens whose key status differs between the two span sets, with our LSD and LCL."""
    import numpy as np

    from pipeline.definition import merge_spans
    from pipeline.text.alignment import hard_key_mask

    offsets = np.array(ours["offsets"], dtype=np.int64).reshape(-1, 2)
    a, b, _ = merge_spans(np.array([s for s, _ in official_spans]), np.array([e for _, e in official_spans]))
    theirs = hard_key_mask(offsets, a, b)
    mine = (
        hard_key_mask(offsets, *map(np.array, zip(*ours["spans"], strict=True)))
        if ours["spans"]
        else theirs & False
    )
    rows = []
    for i in np.flatnonzero(theirs != mine):
        lsd, lcl = ours["lsd"][i], ours["long"][i]
        margin = min(abs((lsd or 0) - 2.0), abs(lcl + 2.0))
        rows.append({"token": int(i), "ours": bool(mine[i]), "lsd": lsd, "lcl": lcl, "margin": margin})
    return rows


def fmt(x, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def ratio(a: float, b: float) -> float | None:
    return a / b if b else None


STAGE1_HEAD = [
    "| document | key spans ours / official | differing tokens | stage 1 time ours / official (s) | ratio "
    "| official + our attention (s) | ours / that | stage 1 peak ours / official (GB) | ratio |",
    "|---|---|---|---|---:|---:|---:|---|---:|",
]
STAGE2_HEAD = [
    "",
    "Stage 2 (SmolLM2-135M, the official package's conventions: no BOS), on the official key spans:",
    "",
    "| document | PPL ours / official | LongPPL ours / official | max rel. diff | time ours / plain / official (s) "
    "| ours / plain | ours / official |",
    "|---|---|---|---:|---|---:|---:|",
]


@dataclass
class Totals:
    """Sums over the documents of the 4k comparison."""

    ours: float = 0.0
    official: float = 0.0
    official_our_attention: float = 0.0
    peak_ours: float = 0.0
    peak_official: float = 0.0
    diffs: list = field(default_factory=list)
    stage2: dict = field(default_factory=lambda: {"ours": 0.0, "plain": 0.0, "official": 0.0})


def stage1_row(jobs: Jobs, job: dict, totals: Totals) -> tuple[str, dict | None]:
    """Stage 1 on one document, both implementations: the table row and the official result."""
    doc = job["doc"]
    ours = jobs.run({**job, "task": "stage1-ours"})
    off = jobs.run({**job, "task": "stage1-official"})
    off_blocked = jobs.run({**job, "task": "stage1-official", "attn": "blocked_sdpa"})
    if "failed" in ours or "failed" in off:
        return (
            f"| {doc} | ours: {ours.get('failed', 'ok')}; official: {off.get('failed', 'ok')} | | | | | | | |",
            None,
        )
    jobs.lost(f"stage 1 time on document {doc}", ours["seconds"], off["seconds"])
    t_blocked = off_blocked.get("seconds")
    diffs = token_diffs(ours, off["spans"])
    totals.diffs += diffs
    totals.ours += ours["seconds"]
    totals.official += off["seconds"]
    totals.official_our_attention += t_blocked or math.nan
    totals.peak_ours = max(totals.peak_ours, ours["process_peak_gb"])
    totals.peak_official = max(totals.peak_official, off["process_peak_gb"])
    row = (
        f"| {doc} | {len(ours['spans'])} / {len(off['spans'])} | {len(diffs)} | {ours['seconds']:.1f} / "
        f"{off['seconds']:.1f} | {ours['seconds'] / off['seconds']:.2f} | {fmt(t_blocked, 1)} | "
        f"{fmt(ours['seconds'] / t_blocked if t_blocked else None)} | {ours['process_peak_gb']:.2f} / "
        f"{off['process_peak_gb']:.2f} | {ours['process_peak_gb'] / off['process_peak_gb']:.2f} |"
    )
    return row, off


def stage2_row(jobs: Jobs, job: dict, spans: list, totals: Totals) -> str:
    """Stage 2 on one document against the official key spans: ours, plain PPL, official."""
    doc = job["doc"]
    r = {
        name: jobs.run({**job, "task": f"stage2-{name}", "spans": spans})
        for name in ("ours", "plain", "official")
    }
    if any("failed" in v for v in r.values()):
        return (
            f"| {doc} | " + "; ".join(f"{k}: {v.get('failed', 'ok')}" for k, v in r.items()) + " | | | | | |"
        )
    rel = max(
        abs(r["ours"]["ppl"] / r["official"]["ppl"] - 1),
        abs((r["ours"]["longppl"] or 1) / (r["official"]["longppl"] or 1) - 1),
    )
    for k in totals.stage2:
        totals.stage2[k] += r[k]["seconds"]
    for base in ("official", "plain"):
        jobs.lost(f"stage 2 vs {base} on document {doc}", r["ours"]["seconds"], r[base]["seconds"])
    return (
        f"| {doc} | {r['ours']['ppl']:.5f} / {r['official']['ppl']:.5f} | {fmt(r['ours']['longppl'], 5)} / "
        f"{fmt(r['official']['longppl'], 5)} | {rel:.1e} | {r['ours']['seconds']:.1f} / {r['plain']['seconds']:.1f}"
        f" / {r['official']['seconds']:.1f} | {r['ours']['seconds'] / r['plain']['seconds']:.3f} | "
        f"{r['ours']['seconds'] / r['official']['seconds']:.2f} |"
    )


def compare_4k(jobs: Jobs, docs: list[int], K: int, d: int) -> tuple[list[str], dict]:
    lines = [
        "## Same documents, 4096 tokens: stage 1 and stage 2",
        "",
        f"GovReport sample documents {docs}, each truncated to 4096 Gemma tokens; K={K}, d={d}, "
        "alpha=2, beta=-2, float32, CPU.",
        "",
        "The official code runs with transformers' default attention (`sdpa`), as its users get it; this "
        "project with its block-sparse `blocked_sdpa` (pipeline/models/attention.py, exact). The column "
        "*official + our attention* gives the official code our attention too, which separates the two "
        "gains: the rest is this project's output head and window scheme.",
        "",
        *STAGE1_HEAD,
    ]
    totals, s2 = Totals(), list(STAGE2_HEAD)
    for doc in docs:
        job = {"tokens": 4096, "doc": doc, "K": K, "d": d}
        row, off = stage1_row(jobs, job, totals)
        lines.append(row)
        if off is not None:
            s2.append(stage2_row(jobs, job, [list(s) for s in off["spans"]], totals))
    summary = {
        "stage1_time_ratio": ratio(totals.ours, totals.official),
        "stage1_vs_official_same_attention": ratio(totals.ours, totals.official_our_attention),
        "stage1_memory_ratio": ratio(totals.peak_ours, totals.peak_official),
        "stage2_vs_plain": ratio(totals.stage2["ours"], totals.stage2["plain"]),
        "stage2_vs_official": ratio(totals.stage2["ours"], totals.stage2["official"]),
        "differing_tokens": totals.diffs,
    }
    return lines + diff_table(totals.diffs) + s2, summary


def diff_table(diffs: list[dict]) -> list[str]:
    if not diffs:
        return []
    return [
        "",
        "Tokens whose key status differs (our LSD and LCL; margin = distance to the nearer threshold):",
        "",
        "| token | key in ours | LSD | LCL | margin |",
        "|---:|---|---:|---:|---:|",
        *(f"| {x['token']} | {x['ours']} | {x['lsd']} | {x['lcl']} | {x['margin']:.1e} |" for x in diffs),
    ]


def sweep(jobs: Jobs, lengths: list[int], K: int, d: int) -> list[str]:
    lines = [
        "## Scaling: stage 1 on one document of growing length",
        "",
        f"The shipped documents concatenated and cut to each length; K={K}, d={d}; each run in its own "
        f"process, killed past {jobs.cap_gb:g} GB.",
        "",
        f"A document of K={K} tokens or fewer has no token with a short context: both implementations run "
        "only the long pass, and the difference is the output head (this project's in blocks, the official "
        "one full-logits product).",
        "",
        "| tokens | ours: s | ours: peak GB | official: s | official: peak GB | time ratio | memory ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in lengths:
        job = {"tokens": n, "doc": None, "K": K, "d": d}
        ours = jobs.run({**job, "task": "stage1-ours"})
        off = jobs.run({**job, "task": "stage1-official"})
        ratio_t = ratio_m = "n/a"
        if "failed" not in ours and "failed" not in off:
            ratio_t = f"{ours['seconds'] / off['seconds']:.2f}"
            jobs.lost(f"stage 1 time at {n} tokens", ours["seconds"], off["seconds"])
            ratio_m = f"{ours['process_peak_gb'] / off['process_peak_gb']:.2f}"
        lines.append(
            f"| {n} | {' | '.join(_cells(ours))} | {' | '.join(_cells(off))} | {ratio_t} | {ratio_m} |"
        )
        print(lines[-1], file=sys.stderr, flush=True)
    return lines


def _cells(r: dict) -> tuple[str, str]:
    if "failed" in r:
        return r["failed"], f"{r['process_peak_gb']:.2f}+"
    return f"{r['seconds']:.1f}", f"{r['process_peak_gb']:.2f}"


def report_head(jobs: Jobs, summary: dict, quick: bool, minutes: float) -> list[str]:
    slower = [
        name
        for name, key in (
            ("stage 1 time", "stage1_time_ratio"),
            ("stage 1 memory", "stage1_memory_ratio"),
            ("stage 2 vs official", "stage2_vs_official"),
            ("drop-in time", "dropin_time_ratio"),
            ("drop-in memory", "dropin_memory_ratio"),
        )
        if summary.get(key) is not None and summary[key] > 1.0
    ] + jobs.slower
    cached = (
        f" {len(jobs.hits)} of its jobs were measured by an earlier run of the same command and read "
        "from artifacts/bench/jobs.jsonl (`--fresh` measures everything again)."
        if jobs.hits
        else ""
    )
    return [
        "# Benchmarks: this pipeline vs the official `longppl` 0.3.0 and plain perplexity",
        "",
        f"Regenerate: `make bench{'-quick' if quick else ''}` ({minutes:.0f} minutes for this run)."
        + cached
        + " Evaluator Gemma 3 270M, evaluated model SmolLM2-135M-Instruct, both embedded, float32.",
        "",
        f"Machine: {stamp()}, longppl 0.3.0.",
        "",
        "## Summary (ratios: this project / baseline, measured in this run)",
        "",
        f"- Stage 1 wall time / official `find_key_token` at 4k tokens: {fmt(summary['stage1_time_ratio'])}",
        "- Stage 1 wall time / official given this project's attention: "
        f"{fmt(summary['stage1_vs_official_same_attention'])}",
        f"- Stage 1 peak memory / official at 4k tokens: {fmt(summary['stage1_memory_ratio'])}",
        f"- Stage 2 / plain-PPL pass (same forward path): {fmt(summary['stage2_vs_plain'], 3)}",
        f"- Stage 2 / official `compute_longppl` (offline mode): {fmt(summary['stage2_vs_official'])}",
        "- Drop-in `compute_longppl` / official, online mode: wall time "
        f"{fmt(summary['dropin_time_ratio'])}, peak memory {fmt(summary['dropin_memory_ratio'])}",
        f"- Evaluator tokens whose key status differs: {len(summary['differing_tokens'])}",
        "- Slower than the baseline: " + (", ".join(slower) if slower else "nowhere in this run"),
        "",
    ]


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--quick", action="store_true", help="4k tokens only")
    parser.add_argument("--K", type=int, default=1024)
    parser.add_argument("--d", type=int, default=1024)
    parser.add_argument("--cap-gb", type=float, default=20.0)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--output", help="a page of its own (default: docs/reports/benchmarks.md)")
    parser.add_argument("--fresh", action="store_true", help="ignore results cached by an earlier run")
    parser.add_argument("--only", choices=["dropin"], help="one comparison only, in its own report")
    args = parser.parse_args()
    jobs = Jobs(args.cap_gb, args.timeout)
    if args.fresh:
        jobs.cache.unlink(missing_ok=True)
    started = time.time()
    docs = [0] if args.quick else [0, 3, 10]
    if args.only == "dropin":
        lines, summary = compare_dropin(jobs, docs, args.K, args.d)
        write_dropin_report(args.output, lines, summary, (time.time() - started) / 60)
        return
    body, summary = compare_4k(jobs, docs, args.K, args.d)
    dropin_lines, dropin_summary = compare_dropin(jobs, docs, args.K, args.d)
    body += ["", *dropin_lines]
    summary |= dropin_summary
    if not args.quick:
        body += ["", *sweep(jobs, [1024, 2048, 4096, 8192, 16384, 32768], args.K, args.d)]
    else:
        body += [""]
    text = "\n".join(report_head(jobs, summary, args.quick, (time.time() - started) / 60) + body) + "\n"
    publish(text, "benchmarks.md", "official", args.output)
    print(text, end="")


def write_dropin_report(out: str | None, lines: list[str], summary: dict, minutes: float) -> None:
    text = "\n".join(
        [
            "# Benchmark: the drop-in `compute_longppl` against the official `longppl` 0.3.0",
            "",
            f"Regenerate: `make bench-dropin` ({minutes:.0f} minutes for this run; `make bench` includes it). "
            f"Machine: {stamp()}.",
            "",
            f"Ratios (this project / official): wall time {fmt(summary['dropin_time_ratio'])}, peak memory "
            f"{fmt(summary['dropin_memory_ratio'])}; largest relative difference of PPL or LongPPL "
            f"{summary['dropin_max_rel_diff']:.1e}.",
            "",
            *lines,
        ]
    )
    publish(text + "\n", "benchmarks.md", "dropin", out)
    print(text)


if __name__ == "__main__":
    main()
