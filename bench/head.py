"""The float32 output head of a bfloat16 model, side by side: the GEMM on upcast operands (the
fallback) against one bfloat16 GEMM with float32 accumulation and output (``torch.mm(...,
out_dtype=torch.float32)``, CUDA only), with the bfloat16 head (the model's own rounding) for scale.

The head is Llama-3.1-8B's shape (hidden 4096, vocabulary 128256, bfloat16, random weights); each
path scores the same positions through ``TargetScorer.score_hidden`` (tiles of 16384 vocabulary
entries, the pipeline's defaults) and is timed as the median of several calls after a warm-up.
On a CPU the float32-output GEMM does not exist (torch 2.13 raises NotImplementedError): only the
fallback and the bfloat16 head are measured there.

    make bench-head                                             # 256 positions on the CPU
    make bench-head ARGS="--device cuda --positions 2048"

Writes its section of docs/reports/benchmarks.md.
"""

from __future__ import annotations

from bench import runner, shared
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


def setup(path: str, positions: int, device: str, hidden: int, vocab: int) -> runner.Work:
    """The head's scoring of ``positions`` random hidden states, on seeded weights, after a warm-up."""
    import torch

    torch.manual_seed(0)
    weight = (torch.randn(vocab, hidden, device=device) * 0.02).to(torch.bfloat16)
    states = torch.randn(positions, hidden, device=device).to(torch.bfloat16)
    targets = torch.randint(0, vocab, (positions,), device=device)
    s = scorer(weight, path)
    if path == PATHS[2] and not s.uses_float32_output(states):
        raise runner.Skip(f"no float32-output GEMM on {device}")
    s.score_hidden(states, targets)  # warm-up: kernels, allocator, cuBLAS workspace

    def work() -> dict:
        s.score_hidden(states, targets)  # its result on the host: synchronised
        return {"flop": 2 * positions * hidden * vocab}

    return work


CASE = runner.Case("head", contenders=PATHS, sizes=(256,), setup=setup)


def report(rows: list[dict]) -> str:
    lines = ["| path | seconds | TFLOP/s | time / upcast |", "|---|---:|---:|---:|"]
    upcast = next(r["work"]["seconds"] for r in rows if r["contender"] == PATHS[1])
    for r in rows:
        if "work" not in r:
            lines.append(f"| {r['contender']} | {r.get('skipped') or r.get('failed')} | | |")
            continue
        seconds = r["work"]["seconds"]
        tflops = r["flop"] / seconds / 1e12
        lines.append(f"| {r['contender']} | {seconds:.3f} | {tflops:.2f} | {seconds / upcast:.2f} |")
    return "\n".join(lines)


def main() -> None:
    if runner.child(CASE):
        return
    parser = shared.arguments(__doc__)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--positions", type=shared.whole(1), default=CASE.sizes[0])
    parser.add_argument("--hidden", type=shared.whole(1), default=4096)
    parser.add_argument("--vocab", type=shared.whole(1), default=128256)
    parser.add_argument("--repeats", type=shared.whole(1), default=3)
    parser.add_argument(
        "--output", type=shared.output_file, help="a page of its own (default: docs/reports/benchmarks.md)"
    )
    args = parser.parse_args()
    options = {"device": args.device, "hidden": args.hidden, "vocab": args.vocab}
    rows = runner.run(CASE, sizes=[args.positions], options=options, repeats=args.repeats, strict=True)
    text = (
        "# The float32 output head of a bfloat16 model\n\n"
        "Regenerate: `make bench-head` (bench/head.py). "
        f"{args.positions} positions through a head of hidden size {args.hidden} and {args.vocab} "
        "vocabulary entries (Llama-3.1-8B's), bfloat16 weights and hidden states, "
        "`TargetScorer.score_hidden` with the default tiles, median of "
        f"{args.repeats} calls after a warm-up, each path in its own process. Machine: {runner.stamp()}; "
        f"device {args.device}. Times are from a machine shared with other jobs: compare them within the "
        "table only.\n\n"
        + report(rows)
        + "\n\nThe float32-output GEMM (`torch.mm(..., out_dtype=torch.float32)`) exists on CUDA "
        "devices of compute capability 8.0 and up only; elsewhere the pipeline runs the upcast path.\n"
    )
    publish(text, "benchmarks.md", "head-float32", args.output)
    print(text)


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
