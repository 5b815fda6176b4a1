"""The float32 output head of a bfloat16 model, side by side: the GEMM on upcast operands (the
fallback) against one bfloat16 GEMM with float32 accumulation and output (``torch.mm(...,
out_dtype=torch.float32)``, CUDA only), with the bfloat16 head (the model's own rounding) for scale.

The head is Llama-3.1-8B's shape (hidden 4096, vocabulary 128256, bfloat16, random weights); each
path scores the same positions through ``TargetScorer.score_hidden`` (tiles of 16384 vocabulary
entries, the pipeline's defaults) and is timed as the median of several calls after a warm-up.
On a CPU the float32-output GEMM does not exist (torch 2.13 raises NotImplementedError): only the
fallback and the bfloat16 head are measured there.

    make bench-head                                             # 256 positions on the CPU
    .venv/bin/python -m bench.head_float32 --device cuda --positions 2048

Writes its section of docs/reports/benchmarks.md.
"""

from __future__ import annotations

from bench.harness import arguments, stamp, timed
from bench.report import publish

PATHS = ("bfloat16 head", "float32 head, upcast operands", "float32 head, float32-output GEMM")


def scorer(weight, path: str):
    import torch

    from pipeline.models.logprobs import TargetScorer

    head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, device=weight.device)
    head.weight = torch.nn.Parameter(weight, requires_grad=False)

    class Model(torch.nn.Module):  # the head alone: TargetScorer needs its model's accessors
        config = type("Config", (), {})()

        def get_decoder(self):
            return self

        def get_output_embeddings(self):
            return head

        def get_input_embeddings(self):
            return head

    head_dtype = torch.bfloat16 if path == PATHS[0] else torch.float32
    out = TargetScorer(Model(), head_dtype=head_dtype)
    out.float32_output = path == PATHS[2]
    return out


def measure(path: str, weight, hidden, targets, repeats: int) -> dict:
    import torch

    s = scorer(weight, path)
    if path == PATHS[2] and not s.uses_float32_output(hidden):
        return {"path": path, "unsupported": f"no float32-output GEMM on {weight.device.type}"}
    cuda = weight.device.type == "cuda"
    s.score_hidden(hidden, targets)  # warm-up: kernels, allocator, cuBLAS workspace
    sync = torch.cuda.synchronize if cuda else None
    seconds, _ = timed(
        lambda: s.score_hidden(hidden, targets), repeats, sync
    )  # its result on the host: synced
    flop = 2 * hidden.shape[0] * weight.shape[1] * weight.shape[0]
    return {"path": path, "seconds": seconds, "tflops": flop / seconds / 1e12}


def run(device: str, positions: int, hidden_size: int, vocab: int, repeats: int) -> list[dict]:
    import torch

    torch.manual_seed(0)
    weight = (torch.randn(vocab, hidden_size, device=device) * 0.02).to(torch.bfloat16)
    hidden = torch.randn(positions, hidden_size, device=device).to(torch.bfloat16)
    targets = torch.randint(0, vocab, (positions,), device=device)
    rows = [measure(path, weight, hidden, targets, repeats) for path in PATHS]
    reference = next(r for r in rows if r["path"] == PATHS[1])
    for r in rows:
        if "seconds" in r:
            r["vs_upcast"] = r["seconds"] / reference["seconds"]
    return rows


def report(rows: list[dict]) -> str:
    lines = ["| path | seconds | TFLOP/s | time / upcast |", "|---|---:|---:|---:|"]
    for r in rows:
        if "unsupported" in r:
            lines.append(f"| {r['path']} | {r['unsupported']} | | |")
        else:
            lines.append(f"| {r['path']} | {r['seconds']:.3f} | {r['tflops']:.2f} | {r['vs_upcast']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--positions", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", help="a page of its own (default: docs/reports/benchmarks.md)")
    args = parser.parse_args()
    rows = run(args.device, args.positions, args.hidden, args.vocab, args.repeats)
    text = (
        "# The float32 output head of a bfloat16 model\n\n"
        "Regenerate: `make bench-head` (bench/head_float32.py). "
        f"{args.positions} positions through a head of hidden size {args.hidden} and {args.vocab} "
        "vocabulary entries (Llama-3.1-8B's), bfloat16 weights and hidden states, "
        "`TargetScorer.score_hidden` with the default tiles, median of "
        f"{args.repeats} calls after a warm-up. Machine: {stamp()}; device {args.device}. "
        "Times are from a machine shared with other jobs: compare them within the table only.\n\n"
        + report(rows)
        + "\n\nThe float32-output GEMM (`torch.mm(..., out_dtype=torch.float32)`) exists on CUDA "
        "devices of compute capability 8.0 and up only; elsewhere the pipeline runs the upcast path.\n"
    )
    publish(text, "benchmarks.md", "head-float32", args.output)
    print(text)


if __name__ == "__main__":
    main()
