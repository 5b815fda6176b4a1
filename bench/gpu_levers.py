"""`make bench-gpu-levers`: where stage 1's time per text goes on a GPU, and what each lever does to it.

One process loads the evaluator of ``make bench-gpu`` (Llama-3.1-8B's shape, random bfloat16 weights,
the float32 head of ``preset=paper``) and runs stage 1's two passes (``long_and_short_logprobs``, K=4096,
d=1024) on the first text of the artifact that ``make bench-gpu`` wrote, after one warm-up run:

- the split: the long pass's body and head, the short windows' body and head;
- the last layer's cost on the short windows (the body without it): what skipping it for the K
  context-only positions of each window could save at most (their share, K / (K + d), of it);
- short windows batched to 5120 (one window), 16384 (the default), 32768 and 65536 tokens;
- sdpa's kernels forced one at a time (flash, cuDNN, memory-efficient);
- the long pass alone (what stage 2 runs per text) with the head in larger blocks;
- the load: the checkpoint's safetensors files straight onto the GPU against the pipeline's load;
- with ``--compile``, the decoder layers under ``torch.compile`` (its compile time, then a run).

Every lever keeps the numbers (the same passes; another kernel is another order of float sums): the
run reports the largest |difference| of its long and short log-probs from the default run's.

    python -m bench.gpu_levers --tokens 32767 --json levers.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from bench import harness
from bench.gpu_paper import WORK, paths
from bench.harness import machine

K, D = 4096, 1024  # the paper's; --K and --d for a dry run on short texts


def synced(fn: Callable[[], object]) -> tuple[float, object]:
    """(seconds, result) of ``fn`` between two device synchronisations."""
    return harness.synced(fn, torch.cuda.synchronize if torch.cuda.is_available() else None)


def first_text_ids(artifact: Path) -> list[int]:
    import pyarrow.parquet as pq

    tokens = pq.read_table(artifact / "tokens.parquet", columns=["doc_id", "token_id"]).to_pydict()
    first = tokens["doc_id"][0]
    return [t for d, t in zip(tokens["doc_id"], tokens["token_id"], strict=True) if d == first]


def load_direct(model: Path, device: str) -> float:
    """Seconds to read every safetensors file of ``model`` onto ``device`` (then freed)."""
    from safetensors.torch import load_file

    def load() -> int:
        return sum(
            t.numel() for f in sorted(model.glob("*.safetensors")) for t in load_file(f, device).values()
        )

    seconds, _ = synced(load)
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return seconds


class Levers:
    """The loaded evaluator, one text, the default run's values, and a record per lever."""

    def __init__(self, scorer, seq: torch.Tensor, K: int = K, d: int = D):
        from pipeline.models.logprobs import long_and_short_logprobs

        self.scorer, self.seq, self.passes = scorer, seq, long_and_short_logprobs
        self.K, self.d, self.quick = K, d, False
        self.rows: list[dict] = []
        self.first_s, first = synced(self.run)
        self.reference = first

    def run(self):
        return self.passes(self.scorer, self.seq, self.K, self.d)

    def measure(self, name: str, fn: Callable[[], object] | None = None, **facts) -> dict:
        try:
            seconds, out = synced(fn or self.run)
        except Exception as exc:  # a kernel that refuses these shapes is a result too
            row = {"lever": name, "error": f"{type(exc).__name__}: {str(exc)[:200]}", **facts}
        else:
            row = {"lever": name, "seconds": round(seconds, 4), **facts}
            if isinstance(out, type(self.reference)):
                row["max_abs_diff"] = max(
                    float(np.nanmax(np.abs(out.long - self.reference.long))),
                    float(np.nanmax(np.abs(out.short - self.reference.short))),
                )
        self.rows.append(row)
        print(json.dumps(row), flush=True)
        return row


def split(levers: Levers) -> None:
    """The long pass's body and head, the short windows' body and head, the last layer's cost."""
    from pipeline.models.logprobs import _batches, short_windows, window_ids

    scorer, seq, K, d = levers.scorer, levers.seq, levers.K, levers.d
    hidden = {}
    levers.measure("long pass: body", lambda: hidden.setdefault("long", scorer.hidden_states(seq[None])[0]))
    positions = torch.arange(len(seq) - 1)
    levers.measure("long pass: head", lambda: scorer.score_hidden(hidden.pop("long")[positions], seq[1:]))
    groups = _batches(short_windows(len(seq), K, d), scorer.window_batch_tokens, K + d)
    batches = [torch.stack([window_ids(seq, w, []) for w in g]) for g in groups]
    levers.measure("short windows: body", lambda: [scorer.hidden_states(b) for b in batches])
    rows = [scorer.hidden_states(b)[:, K - 1 : -1].reshape(-1, scorer.head.weight.shape[1]) for b in batches]
    targets = [b[:, K:].reshape(-1) for b in batches]
    levers.measure(
        "short windows: head", lambda: [scorer.score_hidden(r, t) for r, t in zip(rows, targets, strict=True)]
    )
    rows.clear()
    layers = scorer.body.layers
    scorer.body.layers = torch.nn.ModuleList(list(layers)[:-1])
    try:
        levers.measure(
            "short windows: body less its last layer", lambda: [scorer.hidden_states(b) for b in batches]
        )
    finally:
        scorer.body.layers = layers


def kernels_and_batches(levers: Levers) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    default = levers.scorer.window_batch_tokens
    for tokens in (32768,) if levers.quick else (5120, 32768, 65536):
        levers.scorer.window_batch_tokens = tokens
        levers.measure(f"window_batch_tokens={tokens}", window_batch_tokens=tokens)
    levers.scorer.window_batch_tokens = default
    for backend in (
        ("CUDNN_ATTENTION",)
        if levers.quick
        else ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION")
    ):
        with sdpa_kernel([getattr(SDPBackend, backend)]):
            levers.measure(f"sdpa kernel {backend.lower()}")


def head_blocks(levers: Levers) -> None:
    """The long pass alone (stage 2's pass over a text) with the head in other blocks: positions per
    chunk x vocabulary entries per tile (None: the whole vocabulary at once)."""
    from pipeline.models.logprobs import full_context_logprobs

    scorer, default = levers.scorer, (levers.scorer.head_chunk, levers.scorer.vocab_tile)
    long = levers.reference.long
    blocks = [(8192, 65536)] if levers.quick else [(4096, None), (8192, None), (8192, 65536), (16384, 32768)]
    for chunk, tile in (default, *blocks):
        scorer.head_chunk, scorer.vocab_tile = chunk, tile
        out: dict = {}
        row = levers.measure(
            f"long pass, head_chunk={chunk} vocab_tile={tile}",
            lambda out=out: out.setdefault("long", full_context_logprobs(scorer, levers.seq)),
        )
        row["head_chunk"], row["vocab_tile"] = chunk, tile
        if "long" in out:
            row["max_abs_diff"] = float(np.nanmax(np.abs(out["long"] - long)))
    scorer.head_chunk, scorer.vocab_tile = default


def compiled(levers: Levers) -> None:
    """The decoder layers compiled in place: the first run (compiling) and the next."""
    for layer in levers.scorer.body.layers:
        layer.compile()
    levers.measure("torch.compile of the decoder layers: first run (compiles)")
    levers.measure("torch.compile of the decoder layers: next run")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--tokens", type=int, default=32767)
    parser.add_argument("--texts", type=int, default=2, help="the bench-gpu run whose artifact is read")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--quick", action="store_true", help="one window batch, cuDNN alone, one head block")
    parser.add_argument("--K", type=int, default=K)
    parser.add_argument("--d", type=int, default=D)
    parser.add_argument("--json", type=Path, default=WORK / "levers.json")
    args = parser.parse_args()
    from pipeline.models.loading import load_model
    from pipeline.models.logprobs import scorer_for
    from pipeline.settings import Compute

    p = paths(args.work, args.tokens)
    record: dict = {
        "bench": "gpu_levers",
        "tokens": args.tokens,
        "K": args.K,
        "d": args.d,
        "machine": machine(),
    }
    record["load_direct_s"] = round(load_direct(p["model"], args.device), 3)
    seconds, loaded = synced(lambda: load_model(str(p["model"]), dtype="bfloat16", device=args.device))
    record["load_ours_s"] = round(seconds, 3)
    scorer = scorer_for(loaded, Compute(dtype="bfloat16", device=args.device, head_dtype="float32"))
    ids = first_text_ids(p["keytokens"] / f"paper{args.tokens}x{args.texts}")
    bos = [] if loaded.bos_token_id is None else [loaded.bos_token_id]
    seq = torch.tensor([*bos, *ids], dtype=torch.long)
    levers = Levers(scorer, seq, args.K, args.d)
    levers.quick = args.quick
    record |= {"text_tokens": len(ids), "first_run_s": round(levers.first_s, 3), "levers": levers.rows}
    levers.measure("default (window_batch_tokens=16384)")
    for part in (split, head_blocks, kernels_and_batches, *([compiled] if args.compile else [])):
        part(levers)
        args.json.write_text(json.dumps(record, indent=1))  # what was measured survives a cut
    print(f"written: {args.json}")


if __name__ == "__main__":
    main()


def section(result: dict) -> list[str]:
    """The report's section: each lever's time against the default run's, and its largest difference."""
    m = result["machine"]
    rows = result["levers"]
    default = next((r["seconds"] for r in rows if r["lever"].startswith("default") and "seconds" in r), None)
    lines = [
        f"## Stage 1's levers, {result['tokens']:,} tokens (one text, one process)",
        "",
        f"{m.get('gpu', 'no GPU')}, torch {m['torch']}, transformers {m['transformers']}, commit {m.get('commit')}, "
        f"{m['date']}. `python -m bench.gpu_levers` (run by `bash bench/gpu_machine.sh 1`).",
        "",
        f"- load: the checkpoint's safetensors straight onto the GPU {result['load_direct_s']:.1f} s; the "
        f"pipeline's load {result['load_ours_s']:.1f} s (weights hashed beside it)",
        f"- the first run (warm-up) {result['first_run_s']:.2f} s; {result['text_tokens']:,} tokens",
        "",
        "| lever | seconds | against the default run | largest |difference| of a log-prob |",
        "|---|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['lever']} | | | failed: {r['error'][:120]} |")
            continue
        whole = "max_abs_diff" in r and not r["lever"].startswith("long pass")  # both passes, as stage 1
        ratio = f"{r['seconds'] / default:.3f}x" if default and whole else ""
        diff = f"{r['max_abs_diff']:.1e}" if "max_abs_diff" in r else ""
        lines.append(f"| {r['lever']} | {r['seconds']:.3f} | {ratio} | {diff} |")
    return [*lines, ""]
