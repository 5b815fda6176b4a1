"""Peak resident memory of stage 1 above the loaded evaluator, per document length.

Each length runs in its own process (a clean peak); a sampler thread reads the process's resident
set size every 10 ms. Reported: RSS after loading the model and one 12-token pass (baseline), peak RSS during the long
and short passes of one document, and their difference.

    make bench-memory                       # Gemma 3 270M, float32, 2k/4k/8k tokens, K=4096, d=1024
    .venv/bin/python -m bench.stage1_memory --tokens 8192 --K 1024 --d 1024
"""

from __future__ import annotations

import gc
import json
import os
import time

from bench.harness import ROOT, PeakMemory, arguments, child, memory_record, rss, run, stamp
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


def measure(
    model: str, dtype: str, tokens: int, K: int, d: int, head_chunk: int, window_batch_tokens: int
) -> dict:
    """One contender, in its own process: stage 1's log-probs of one ``tokens``-token document."""
    import torch

    from pipeline.models.loading import load_model
    from pipeline.models.logprobs import TargetScorer, long_and_short_logprobs

    lm = load_model(model, dtype=dtype, device="cpu")
    ids = document_ids(lm.tokenizer, tokens)
    seq = torch.tensor([lm.bos_token_id, *ids[: tokens - 1]])
    scorer = TargetScorer(lm.model, head_chunk=head_chunk, window_batch_tokens=window_batch_tokens)
    scorer.check_against_full_forward()  # touches every weight: the baseline is the loaded model
    gc.collect()
    baseline = rss()
    start = time.perf_counter()
    with PeakMemory() as peak:
        long_and_short_logprobs(scorer, seq, K, d, bos_id=lm.bos_token_id)
    return {
        "model": model,
        "dtype": dtype,
        "tokens": len(seq),
        "K": K,
        "d": d,
        "head_chunk": head_chunk,
        "window_batch_tokens": window_batch_tokens,
        **memory_record(baseline, peak, start),
    }


def main() -> None:
    if child(measure):
        return
    parser = arguments(__doc__)
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tokens", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument("--K", type=int, default=4096)
    parser.add_argument("--d", type=int, default=1024)
    parser.add_argument("--head-chunk", type=int, default=DEFAULT_HEAD_CHUNK)
    parser.add_argument("--window-batch-tokens", type=int, default=16384)
    args = parser.parse_args()
    fixed = {"model": args.model, "dtype": args.dtype, "K": args.K, "d": args.d}
    fixed |= {"head_chunk": args.head_chunk, "window_batch_tokens": args.window_batch_tokens}
    rows = run("bench.stage1_memory", [{**fixed, "tokens": n} for n in args.tokens])
    print("| tokens | K | d | baseline (model loaded) GB | peak GB | above model GB | seconds |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['tokens']} | {r['K']} | {r['d']} | {r['baseline_gb']:.2f} | {r['peak_gb']:.2f} "
            f"| {r['above_model_gb']:.2f} | {r['seconds']:.0f} |"
        )
    print(
        f"\nmodel {args.model}, {args.dtype}, head_chunk {args.head_chunk}, "
        f"window_batch_tokens {args.window_batch_tokens}, CPU threads {os.cpu_count()}; {stamp()}"
    )


if __name__ == "__main__":
    main()
