"""This project against the official `longppl` package (0.3.0) and plain perplexity, side by side.

Every measurement runs in its own subprocess, watched by the parent: its peak resident memory is
sampled every 50 ms and a run that passes the memory cap is killed and recorded as such, instead
of taking the machine down. Same documents, models, K, d, alpha, beta and dtype for both
implementations; the official conventions are used throughout (BOS on the evaluator's long pass
only, no special tokens for the evaluated model): `short_window_bos=false`, `add_bos=false`.

    make bench          # everything: 4k comparisons, stage 2, scaling sweep 1k-16k and 32k
    make bench-quick    # 4k only
Writes docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
EVALUATOR, MODEL = "gemma3-270m", "smollm2-135m"
CPU_PRESET_FILE = ROOT / "conf/preset/cpu.yaml"  # the settings `make keytokens` runs with


# ----------------------------------------------------------------------------------------------
# Workers (run in a subprocess each)


class Sampler:
    """Peak RSS of this process, sampled in a thread (the parent also watches from outside)."""

    def __init__(self):
        import threading

        import psutil

        self.proc, self.peak = psutil.Process(), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.02)

    def __enter__(self):
        self.peak = self.proc.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def bench_text(tokenizer, n_tokens: int, doc: int | None) -> str:
    """A text of n_tokens - 1 evaluator tokens (n_tokens with BOS): one sample document, or all
    concatenated. (The official find_key_token fails when its last window holds a single token,
    iterating a 0-d tensor; sequences of a multiple of d tokens avoid that.)"""
    from pipeline.models import encode_with_offsets

    rows = [
        json.loads(line)["text"] for line in (ROOT / "data/govreport-sample.jsonl").open(encoding="utf-8")
    ]
    text = rows[doc] if doc is not None else "\n\n".join(rows)
    enc = encode_with_offsets(tokenizer, text)
    if len(enc.ids) >= n_tokens:
        text = text[: int(enc.offsets[n_tokens - 1, 0])]
    return text


def worker(job: dict) -> dict:
    import numpy as np
    import torch

    from pipeline import attention
    from pipeline.models import load_model

    torch.set_grad_enabled(False)
    attn = job.get("attn") or ("sdpa" if job["task"].endswith("official") else attention.NAME)
    evaluator = load_model(EVALUATOR, dtype="float32", device="cpu", attn_implementation=attn)
    text = bench_text(evaluator.tokenizer, job["tokens"], job.get("doc"))
    out = {"chars": len(text)}
    if job["task"].startswith("stage1"):
        lm = evaluator
    else:
        del evaluator
        lm = load_model(MODEL, dtype="float32", device="cpu", attn_implementation=attn)
    lm.model(input_ids=torch.tensor([[1, 2, 3]]))  # warm up: every weight paged in before timing
    start = time.perf_counter()
    with Sampler() as sampler:
        out.update(TASKS[job["task"]](lm, text, job))
    out["seconds"] = time.perf_counter() - start
    out["peak_gb"] = sampler.peak / 1e9
    out["tokens_scored"] = int(np.asarray(out.get("tokens_scored", 0)))
    return out


def stage1_ours(lm, text, job):
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from pipeline.corpus import Document
    from pipeline.logprobs import TargetScorer
    from pipeline.models import encode_with_offsets
    from pipeline.stage1 import Prepared, score_document

    cpu_preset = OmegaConf.load(CPU_PRESET_FILE)

    enc = encode_with_offsets(lm.tokenizer, text)
    item = Prepared(0, Document("bench", text), text, enc.ids, enc.offsets, enc.offsets_from, False)
    cfg = SimpleNamespace(
        K=job["K"],
        d=job["d"],
        alpha=2.0,
        beta=-2.0,
        gamma=5.0,
        short_window_bos=False,
        window_batch_tokens=cpu_preset.window_batch_tokens,
    )
    _, tokens, spans = score_document(TargetScorer(lm.model), item, cfg, lm.bos_token_id)
    return {
        "spans": list(zip(spans["char_start"].to_pylist(), spans["char_end"].to_pylist(), strict=True)),
        "lsd": [None if x is None else round(x, 7) for x in tokens["lsd"].to_pylist()],
        "long": [round(x, 7) for x in tokens["long_logprob"].to_pylist()],
        "offsets": list(zip(tokens["char_start"].to_pylist(), tokens["char_end"].to_pylist(), strict=True)),
        "tokens_scored": len(enc.ids),
    }


def stage1_official(lm, text, job):
    from longppl.longppl import find_key_token

    intervals = find_key_token(text, lm.model, lm.tokenizer, job["K"], job["d"], alpha=2, beta=-2)
    return {"spans": [tuple(map(int, row)) for row in intervals.tolist()], "tokens_scored": 0}


def stage2_ours(lm, text, job):
    from pipeline.logprobs import TargetScorer
    from pipeline.scoring import ScoreSettings, score_document

    view = _view(text, job["spans"])
    s = score_document(lm, TargetScorer(lm.model), view, ScoreSettings(add_bos=False))
    return {
        "ppl": s.all.perplexity(),
        "longppl": s.key.perplexity(),
        "n_key": int(s.key.n),
        "tokens_scored": int(s.all.n),
    }


def stage2_plain(lm, text, job):
    import torch

    from pipeline.logprobs import TargetScorer, full_context_logprobs
    from pipeline.models import encode_with_offsets

    ids = encode_with_offsets(lm.tokenizer, text).ids
    nll = -full_context_logprobs(TargetScorer(lm.model), torch.tensor(ids))[1:]
    return {"ppl": float(math.exp(nll.mean())), "tokens_scored": len(nll)}


def stage2_official(lm, text, job):
    from longppl.longppl import compute_longppl

    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write(";".join(f"[{a}, {b}]" for a, b in job["spans"]))
    result = compute_longppl(text, lm.model, None, tokenizer=lm.tokenizer, save_path=handle.name)
    return {
        "ppl": float(result["ppl"]),
        "longppl": None if result["longppl"] is None else float(result["longppl"]),
        "n_key": result["n_key_token"],
        "tokens_scored": int(result["n_token"]) - 1,
    }


def _view(text: str, spans: list) -> object:
    """A DocumentView from spans alone (stage 2 of the official package has no soft weights)."""
    import numpy as np
    import pyarrow as pa

    from pipeline.scoring import DocumentView

    empty = pa.table(
        {
            "char_start": pa.array([], pa.int32()),
            "char_end": pa.array([], pa.int32()),
            "lsd": pa.array([], pa.float64()),
            "long_logprob": pa.array([], pa.float64()),
            "soft_weight": pa.array([], pa.float64()),
        }
    )
    spans_table = pa.table(
        {
            "char_start": pa.array(np.array([a for a, _ in spans], dtype=np.int32)),
            "char_end": pa.array(np.array([b for _, b in spans], dtype=np.int32)),
        }
    )
    return DocumentView("bench", text, empty, spans_table)


TASKS = {
    "stage1-ours": stage1_ours,
    "stage1-official": stage1_official,
    "stage2-ours": stage2_ours,
    "stage2-official": stage2_official,
    "stage2-plain": stage2_plain,
}


# ----------------------------------------------------------------------------------------------
# The parent: runs each job in a watched subprocess, compares, writes the report


CACHE = ROOT / "artifacts/bench/jobs.jsonl"
CACHE_HITS: list[str] = []  # jobs of this report measured by an earlier run (a resumed bench)
SLOWER: list[str] = []  # every single comparison this project lost, for the summary


def run_job(job: dict, cap_gb: float, timeout: float) -> dict:
    """One job's result: from this run's cache when it finished before (a crashed bench resumes),
    else measured in a subprocess and appended to the cache."""
    key = json.dumps({**job, "cap_gb": cap_gb}, sort_keys=True)
    if CACHE.is_file():
        for line in CACHE.read_text().splitlines():
            entry = json.loads(line)
            if entry["key"] == key:
                CACHE_HITS.append(job["task"])
                return entry["result"]
    result = _measure(job, cap_gb, timeout)
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    with CACHE.open("a") as handle:
        handle.write(json.dumps({"key": key, "result": result}) + "\n")
    outcome = result.get("failed") or f"{result['seconds']:.1f} s, {result['process_peak_gb']:.2f} GB"
    print(
        f"{job['task']} {job['tokens']} tokens (doc {job.get('doc')}): {outcome}", file=sys.stderr, flush=True
    )
    return result


def _measure(job: dict, cap_gb: float, timeout: float) -> dict:
    """Run one job in a subprocess; kill it past the memory cap or the timeout."""
    import psutil

    cmd = [sys.executable, __file__, "--worker", json.dumps(job)]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT)
        watched, peak, started, killed = psutil.Process(proc.pid), 0, time.time(), None
        while proc.poll() is None:
            try:
                rss = sum(p.memory_info().rss for p in [watched, *watched.children(recursive=True)])
            except psutil.NoSuchProcess:
                break
            peak = max(peak, rss)
            if rss > cap_gb * 1e9 or time.time() - started > timeout:
                killed = (
                    f"exceeded the {cap_gb:g} GB memory cap"
                    if rss > cap_gb * 1e9
                    else f"timed out ({timeout:.0f} s)"
                )
                proc.kill()
            time.sleep(0.05)
        proc.wait()
        out.seek(0)
        err.seek(0)
        if killed:
            return {"failed": killed, "process_peak_gb": peak / 1e9}
        if proc.returncode < 0:  # the kernel's OOM killer acts before the watchdog's next look
            return {
                "failed": f"killed by signal {-proc.returncode} (out of memory)",
                "process_peak_gb": peak / 1e9,
            }
        if proc.returncode != 0:
            lines = err.read().strip().splitlines() or ["no output"]
            return {"failed": "error: " + lines[-1][:300], "process_peak_gb": peak / 1e9}
        result = json.loads(out.read().strip().splitlines()[-1])
        result["process_peak_gb"] = peak / 1e9
        return result


def token_diffs(ours: dict, official_spans: list) -> list[dict]:
    """Evaluator tokens whose key status differs between the two span sets, with our LSD and LCL."""
    import numpy as np

    from pipeline.alignment import hard_key_mask
    from pipeline.keytokens import merge_spans

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


def compare_4k(docs: list[int], K: int, d: int, cap: float, timeout: float) -> tuple[list[str], dict]:
    lines = [
        "## Same documents, 4096 tokens: stage 1 and stage 2",
        "",
        f"GovReport sample documents {docs}, each truncated to 4096 Gemma tokens; K={K}, d={d}, "
        "alpha=2, beta=-2, float32, CPU.",
        "",
        "The official code runs with transformers' default attention (`sdpa`), as its users get it; this "
        "project with its block-sparse `blocked_sdpa` (pipeline/attention.py, exact). The column "
        "*official + our attention* gives the official code our attention too, which separates the two "
        "gains: the rest is this project's output head and window scheme.",
        "",
        "| document | key spans ours / official | differing tokens | stage 1 time ours / official (s) | ratio "
        "| official + our attention (s) | ours / that | stage 1 peak ours / official (GB) | ratio |",
        "|---|---|---|---|---:|---:|---:|---|---:|",
    ]
    totals = {"t_ours": 0.0, "t_off": 0.0, "m_ours": 0.0, "m_off": 0.0, "diffs": []}
    s2 = [
        "",
        "Stage 2 (SmolLM2-135M, the official package's conventions: no BOS), on the official key spans:",
        "",
        "| document | PPL ours / official | LongPPL ours / official | max rel. diff | time ours / plain / official (s) "
        "| ours / plain | ours / official |",
        "|---|---|---|---:|---|---:|---:|",
    ]
    t2 = {"ours": 0.0, "plain": 0.0, "official": 0.0}
    for doc in docs:
        job = {"tokens": 4096, "doc": doc, "K": K, "d": d}
        ours = run_job({**job, "task": "stage1-ours"}, cap, timeout)
        off = run_job({**job, "task": "stage1-official"}, cap, timeout)
        off_blocked = run_job({**job, "task": "stage1-official", "attn": "blocked_sdpa"}, cap, timeout)
        if "failed" in ours or "failed" in off:
            lines.append(
                f"| {doc} | ours: {ours.get('failed', 'ok')}; official: {off.get('failed', 'ok')} | | | | | | | |"
            )
            continue
        if ours["seconds"] > off["seconds"]:
            SLOWER.append(f"stage 1 time on document {doc}")
        t_blocked = off_blocked.get("seconds")
        totals["t_off_blocked"] = totals.get("t_off_blocked", 0.0) + (t_blocked or math.nan)
        diffs = token_diffs(ours, off["spans"])
        totals["diffs"] += diffs
        for key, src in (("t_ours", ours["seconds"]), ("t_off", off["seconds"])):
            totals[key] += src
        totals["m_ours"] = max(totals["m_ours"], ours["process_peak_gb"])
        totals["m_off"] = max(totals["m_off"], off["process_peak_gb"])
        lines.append(
            f"| {doc} | {len(ours['spans'])} / {len(off['spans'])} | {len(diffs)} | {ours['seconds']:.1f} / "
            f"{off['seconds']:.1f} | {ours['seconds'] / off['seconds']:.2f} | {fmt(t_blocked, 1)} | "
            f"{fmt(ours['seconds'] / t_blocked if t_blocked else None)} | {ours['process_peak_gb']:.2f} / "
            f"{off['process_peak_gb']:.2f} | {ours['process_peak_gb'] / off['process_peak_gb']:.2f} |"
        )
        spans = [list(s) for s in off["spans"]]
        r = {
            name: run_job({**job, "task": f"stage2-{name}", "spans": spans}, cap, timeout)
            for name in ("ours", "plain", "official")
        }
        if any("failed" in v for v in r.values()):
            s2.append(
                f"| {doc} | "
                + "; ".join(f"{k}: {v.get('failed', 'ok')}" for k, v in r.items())
                + " | | | | | |"
            )
            continue
        rel = max(
            abs(r["ours"]["ppl"] / r["official"]["ppl"] - 1),
            abs((r["ours"]["longppl"] or 1) / (r["official"]["longppl"] or 1) - 1),
        )
        for k in t2:
            t2[k] += r[k]["seconds"]
        for base in ("official", "plain"):
            if r["ours"]["seconds"] > r[base]["seconds"]:
                ratio = r["ours"]["seconds"] / r[base]["seconds"]
                SLOWER.append(f"stage 2 vs {base} on document {doc} ({ratio:.2f})")
        s2.append(
            f"| {doc} | {r['ours']['ppl']:.5f} / {r['official']['ppl']:.5f} | {fmt(r['ours']['longppl'], 5)} / "
            f"{fmt(r['official']['longppl'], 5)} | {rel:.1e} | {r['ours']['seconds']:.1f} / {r['plain']['seconds']:.1f}"
            f" / {r['official']['seconds']:.1f} | {r['ours']['seconds'] / r['plain']['seconds']:.3f} | "
            f"{r['ours']['seconds'] / r['official']['seconds']:.2f} |"
        )
    summary = {
        "stage1_time_ratio": totals["t_ours"] / totals["t_off"] if totals["t_off"] else None,
        "stage1_vs_official_same_attention": totals["t_ours"] / totals["t_off_blocked"]
        if totals.get("t_off_blocked")
        else None,
        "stage1_memory_ratio": totals["m_ours"] / totals["m_off"] if totals["m_off"] else None,
        "stage2_vs_plain": t2["ours"] / t2["plain"] if t2["plain"] else None,
        "stage2_vs_official": t2["ours"] / t2["official"] if t2["official"] else None,
        "differing_tokens": totals["diffs"],
    }
    if totals["diffs"]:
        lines += [
            "",
            "Tokens whose key status differs (our LSD and LCL; margin = distance to the nearer threshold):",
            "",
            "| token | key in ours | LSD | LCL | margin |",
            "|---:|---|---:|---:|---:|",
        ]
        lines += [
            f"| {x['token']} | {x['ours']} | {x['lsd']} | {x['lcl']} | {x['margin']:.1e} |"
            for x in totals["diffs"]
        ]
    return lines + s2, summary


def sweep(lengths: list[int], K: int, d: int, cap: float, timeout: float) -> list[str]:
    lines = [
        "## Scaling: stage 1 on one document of growing length",
        "",
        f"The shipped documents concatenated and cut to each length; K={K}, d={d}; each run in its own "
        f"process, killed past {cap:g} GB.",
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
        ours = run_job({**job, "task": "stage1-ours"}, cap, timeout)
        off = run_job({**job, "task": "stage1-official"}, cap, timeout)

        def cell(r):
            return (
                (r["failed"], f"{r['process_peak_gb']:.2f}+")
                if "failed" in r
                else (f"{r['seconds']:.1f}", f"{r['process_peak_gb']:.2f}")
            )

        ratio_t = ratio_m = "n/a"
        if "failed" not in ours and "failed" not in off:
            ratio_t = f"{ours['seconds'] / off['seconds']:.2f}"
            if ours["seconds"] > off["seconds"]:
                SLOWER.append(f"stage 1 time at {n} tokens ({ratio_t})")
            ratio_m = f"{ours['process_peak_gb'] / off['process_peak_gb']:.2f}"
        lines.append(f"| {n} | {' | '.join(cell(ours))} | {' | '.join(cell(off))} | {ratio_t} | {ratio_m} |")
        print(lines[-1], file=sys.stderr, flush=True)
    return lines


def machine() -> str:
    import psutil
    import torch
    import transformers

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return (
        f"{cpu}, {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB; Python "
        f"{platform.python_version()}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"transformers {transformers.__version__}, longppl 0.3.0"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="4k tokens only")
    parser.add_argument("--K", type=int, default=1024)
    parser.add_argument("--d", type=int, default=1024)
    parser.add_argument("--cap-gb", type=float, default=20.0)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--output", default=str(ROOT / "docs/benchmarks.md"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--fresh", action="store_true", help="ignore results cached by an earlier run")
    args = parser.parse_args()
    if args.fresh and not args.worker:
        CACHE.unlink(missing_ok=True)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    started = time.time()
    docs = [0] if args.quick else [0, 3, 10]
    lengths = [] if args.quick else [1024, 2048, 4096, 8192, 16384, 32768]
    body, summary = compare_4k(docs, args.K, args.d, args.cap_gb, args.timeout)
    body += [""] + (sweep(lengths, args.K, args.d, args.cap_gb, args.timeout) if lengths else [])
    slower = [
        name
        for name, key, limit in (
            ("stage 1 time", "stage1_time_ratio", 1.0),
            ("stage 1 memory", "stage1_memory_ratio", 1.0),
            ("stage 2 vs official", "stage2_vs_official", 1.0),
        )
        if summary[key] is not None and summary[key] > limit
    ] + SLOWER
    cached = (
        f" {len(CACHE_HITS)} of its jobs were measured by an earlier run of the same command and read "
        "from artifacts/bench/jobs.jsonl (`--fresh` measures everything again)."
        if CACHE_HITS
        else ""
    )
    head = [
        "# Benchmarks: this pipeline vs the official `longppl` 0.3.0 and plain perplexity",
        "",
        f"Regenerate: `make bench{'-quick' if args.quick else ''}` ({(time.time() - started) / 60:.0f} minutes "
        "for this run)." + cached + " Evaluator Gemma 3 270M, evaluated model SmolLM2-135M-Instruct, both "
        "embedded, float32.",
        "",
        f"Machine: {machine()}.",
        "",
        "## Summary (ratios: this project / baseline, measured in this run)",
        "",
        f"- Stage 1 wall time / official `find_key_token` at 4k tokens: {fmt(summary['stage1_time_ratio'])}",
        "- Stage 1 wall time / official given this project's attention: "
        f"{fmt(summary['stage1_vs_official_same_attention'])}",
        f"- Stage 1 peak memory / official at 4k tokens: {fmt(summary['stage1_memory_ratio'])}",
        f"- Stage 2 / plain-PPL pass (same forward path): {fmt(summary['stage2_vs_plain'], 3)}",
        f"- Stage 2 / official `compute_longppl` (offline mode): {fmt(summary['stage2_vs_official'])}",
        f"- Evaluator tokens whose key status differs: {len(summary['differing_tokens'])}",
        "- Slower than the baseline: " + (", ".join(slower) if slower else "nowhere in this run"),
        "",
    ]
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(head + body) + "\n")
    print("\n".join(head + body))


if __name__ == "__main__":
    main()
