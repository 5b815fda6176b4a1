"""Peak memory of sliding-window attention, side by side: transformers' sdpa (a dense n x n mask),
the previous blocked_sdpa (blocks of queries, but the same dense mask built first) and blocked_sdpa
now (a described window, one band per block of queries).

With ``--math``: a plain causal layer with grouped key/value heads (Llama's shape) forced onto sdpa's
math backend, the path float32 takes on CUDA: transformers' sdpa builds the (heads, n, n) scores,
blocked_sdpa runs it in query blocks.

The model is a one-layer sliding-window model (Mistral-style, window 512, hidden 256, 4 heads of 64,
float32, random weights): its memory during a forward pass is the attention's. Each (implementation,
length) runs in its own process. Reported: the bytes of the mask the layer receives, peak memory
above the loaded model (CPU: resident set, sampled every 10 ms; CUDA: max_memory_allocated) and time.

    make bench-attention                                  # 8k and 16k tokens on the CPU
    make bench-attention ARGS="--tokens 8192 16384 32768 --device cuda"
    make bench-attention ARGS="--math --implementations sdpa blocked_sdpa"   # -> its own section

Writes its section of docs/reports/memory.md.
"""

from __future__ import annotations

from bench import runner, shared
from bench.report import publish


def register(mask_sizes: list[int]) -> None:
    """The three implementations under bench_* names, each recording the size of its layer masks."""
    import torch
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    from pipeline.models import attention

    def recorded(mask_function):
        def make(**kwargs):
            mask = mask_function(**kwargs)
            mask_sizes.append(mask.numel() * mask.element_size() if torch.is_tensor(mask) else 0)
            return mask

        return make

    pairs = {
        "sdpa": (sdpa_attention_forward, sdpa_mask),
        "dense_blocked": (attention.blocked_sdpa_forward, sdpa_mask),
        "blocked_sdpa": (attention.blocked_sdpa_forward, attention.window_mask),
    }
    for name, (forward, mask) in pairs.items():
        AttentionInterface.register(f"bench_{name}", forward)
        AttentionMaskInterface.register(f"bench_{name}", recorded(mask))


def setup(implementation: str, tokens: int, device: str, math: bool = False) -> runner.Work:
    """One forward pass of the one-layer model, built and warmed up."""
    import contextlib

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from studies.random_models import config as random_config
    from studies.random_models import random_model

    mask_sizes: list[int] = []
    register(mask_sizes)
    config = random_config(
        "mistral", vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2 if math else 4, head_dim=64,
        max_position_embeddings=max(tokens, 1024), sliding_window=None if math else 512,
    )  # fmt: skip
    model = random_model(config, attn=f"bench_{implementation}").to(device)
    ids = torch.randint(0, 1000, (1, tokens), device=device)
    with torch.inference_mode():
        model.model(input_ids=ids[:, :64], use_cache=False)  # warm-up: kernels and allocator

    def work() -> dict:
        mask_sizes.clear()
        backend = sdpa_kernel([SDPBackend.MATH]) if math else contextlib.nullcontext()
        with backend, torch.inference_mode():
            model.model(input_ids=ids, use_cache=False)
        return {"mask_mb": max(mask_sizes, default=0) / 2**20}

    return work


CASE = runner.Case(
    "attention", contenders=("sdpa", "dense_blocked", "blocked_sdpa"), sizes=(8192, 16384), setup=setup
)


def report(rows: list[dict]) -> str:
    lines = [
        "| implementation | tokens | layer mask (MiB) | peak above model (MiB) | seconds |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['contender']} | {r['size']} | failed: {r['failed']} | | |")
            continue
        w = r["work"]
        lines.append(
            f"| {r['contender']} | {r['size']} | {r['mask_mb']:.1f} | {w['above_start_bytes'] / 2**20:.1f} "
            f"| {w['seconds']:.2f} |"
        )
    return "\n".join(lines)


MATH_PAGE = (
    "# Peak memory of plain causal attention on sdpa's math backend\n\n"
    'Regenerate: `make bench-attention ARGS="--math --implementations sdpa blocked_sdpa"` '
    "(bench/attention.py). A one-layer model of Llama's shape, tiny (plain causal attention, hidden "
    "256, 4 query heads of 64 over 2 key/value heads, float32, random weights), forced onto sdpa's math "
    "backend (`torch.nn.attention.sdpa_kernel`): the path a float32 run takes on CUDA, where flash has no "
    "float32 kernel. transformers' sdpa builds the (heads, n, n) scores; blocked_sdpa runs the layer in "
    "query blocks of 512 (at most (heads, 512, n) scores). Peak: above the loaded model (CPU: resident set "
    "sampled every 10 ms; CUDA: max_memory_allocated). A row `failed` passed the memory cap.\n\n"
)


def document(rows: list[dict], machine: str, math: bool = False) -> str:
    """Its section of docs/reports/memory.md (``math``: the math backend's): what was measured,
    where, and the table."""
    if math:
        return MATH_PAGE + f"Machine: {machine}.\n\n" + report(rows) + "\n"
    return (
        "# Peak memory of sliding-window attention\n\n"
        "Regenerate: `make bench-attention` (bench/attention.py). A one-layer Mistral-style model "
        "(every layer a sliding window of 512 tokens, hidden 256, 4 heads of 64, float32, random weights), "
        "one forward pass per process. Layer mask: the mask the attention layer receives (transformers' "
        "sdpa: a dense (1, 1, n, n) boolean; blocked_sdpa: a description, 0 bytes). Peak: above the loaded "
        "model (CPU: resident set sampled every 10 ms; CUDA: max_memory_allocated). `dense_blocked` is "
        "blocked_sdpa as it was before: query blocks, but transformers' dense mask built first.\n\n"
        f"Machine: {machine}. Times are from a machine shared with other jobs: compare them within "
        "the table only.\n\n" + report(rows) + "\n"
    )


def main() -> None:
    if runner.child(CASE):
        return
    parser = shared.arguments(__doc__)
    parser.add_argument("--tokens", type=shared.whole(1), nargs="+", default=list(CASE.sizes))
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--implementations", nargs="+", default=list(CASE.contenders), choices=CASE.contenders
    )
    parser.add_argument("--cap-gb", type=shared.above(0), default=12.0)
    parser.add_argument("--math", action="store_true", help="plain causal layer on the math backend")
    parser.add_argument(
        "--output", type=shared.output_file, help="a page of its own (default: docs/reports/memory.md)"
    )
    args = parser.parse_args()
    options = {"device": args.device, "math": args.math}
    rows = runner.run(CASE, contenders=args.implementations, sizes=args.tokens, options=options,
                      cap_gb=args.cap_gb, timeout=900)  # fmt: skip
    text = document(rows, runner.stamp(), args.math)
    publish(text, "memory.md", "attention-math" if args.math else "attention", args.output)
    print(text)


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
