"""Peak resident memory of stage 1 above the loaded evaluator, per document length.

Each length runs in its own process (a clean peak); a sampler thread reads the process's resident
set size every 10 ms. Reported: RSS after loading the model and one 12-token pass (baseline), peak RSS during the long
and short passes of one document, and their difference.

    make bench-memory                       # Gemma 3 270M, float32, 2k/4k/8k tokens, K=4096, d=1024
    .venv/bin/python -m bench.stage1_memory --tokens 8192 --K 1024 --d 1024
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time

from bench.harness import ROOT, PeakMemory, memory_record
from pipeline.settings import DEFAULT_HEAD_CHUNK


def document_ids(tokenizer, n_tokens: int) -> list[int]:
    """The first n_tokens evaluator tokens of the shipped GovReport sample, documents concatenated."""
    texts = [
        json.loads(line)["text"] for line in (ROOT / "data/govreport-sample.jsonl").open(encoding="utf-8")
    ]
    ids = tokenizer("\n\n".join(texts), add_special_tokens=False)["input_ids"]
    if len(ids) < n_tokens:
        raise SystemExit(f"the sample has only {len(ids)} tokens")
    return ids[:n_tokens]


def measure_one(args: argparse.Namespace) -> dict:
    import psutil
    import torch

    from pipeline.models.loading import load_model
    from pipeline.models.logprobs import TargetScorer, long_and_short_logprobs

    lm = load_model(args.model, dtype=args.dtype, device="cpu")
    n_tokens = args.tokens[0]
    ids = document_ids(lm.tokenizer, n_tokens)
    seq = torch.tensor([lm.bos_token_id, *ids[: n_tokens - 1]])
    scorer = TargetScorer(lm.model, head_chunk=args.head_chunk, window_batch_tokens=args.window_batch_tokens)
    scorer.check_against_full_forward()  # touches every weight: the baseline is the loaded model
    gc.collect()
    baseline = psutil.Process().memory_info().rss
    start = time.perf_counter()
    with PeakMemory() as peak:
        long_and_short_logprobs(scorer, seq, args.K, args.d, bos_id=lm.bos_token_id)
    return {
        "model": args.model,
        "dtype": args.dtype,
        "tokens": len(seq),
        "K": args.K,
        "d": args.d,
        "head_chunk": args.head_chunk,
        "window_batch_tokens": args.window_batch_tokens,
        **memory_record(baseline, peak, start),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tokens", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument("--K", type=int, default=4096)
    parser.add_argument("--d", type=int, default=1024)
    parser.add_argument("--head-chunk", type=int, default=DEFAULT_HEAD_CHUNK)
    parser.add_argument("--window-batch-tokens", type=int, default=16384)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_one(args)))
        return
    rows = []
    for n in args.tokens:
        cmd = [
            sys.executable,
            "-m",
            "bench.stage1_memory",
            "--one",
            "--tokens",
            str(n),
            "--model",
            args.model,
            "--dtype",
            args.dtype,
            "--K",
            str(args.K),
            "--d",
            str(args.d),
            "--head-chunk",
            str(args.head_chunk),
            "--window-batch-tokens",
            str(args.window_batch_tokens),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if out.returncode != 0:
            raise SystemExit(f"{n} tokens failed:\n{out.stderr[-2000:]}")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"{n} tokens done", file=sys.stderr)
    print("| tokens | K | d | baseline (model loaded) GB | peak GB | above model GB | seconds |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['tokens']} | {r['K']} | {r['d']} | {r['baseline_gb']:.2f} | {r['peak_gb']:.2f} "
            f"| {r['above_model_gb']:.2f} | {r['seconds']:.0f} |"
        )
    print(
        f"\nmodel {args.model}, {args.dtype}, head_chunk {args.head_chunk}, "
        f"window_batch_tokens {args.window_batch_tokens}, CPU threads {os.cpu_count()}"
    )


if __name__ == "__main__":
    main()
