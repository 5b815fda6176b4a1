"""LooGLE's generation (``pipeline.loogle.generation.decoding.generate``: greedy, repetition_penalty=2.0) by a
model of Llama-3.1-8B's shape with random bfloat16 weights on one GPU: the prefill of a 32,000-token prompt
and the time per new token (docs/loogle.md). The contenders, in one process: building the model, then
the generation of 1, 129 and 513 new tokens (after an untimed warm-up); the time per new token is the
difference of the longest and the shortest over their new tokens.

    make bench-loogle-decode                                # on a GPU
    make bench-loogle-decode ARGS="--shape tiny"            # a dry run on the CPU (2000 tokens, 1 and 9 new)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import runner, shared
from studies.random_models import LLAMA31_SHAPES as SHAPES

BUILD = "build the model"
LOADED: dict[str, Any] = {}  # the model the contenders share in their process


class Tokenizer:
    """Enough of a tokenizer for ``generate``: no end of text, nothing to decode."""

    pad_token_id, eos_token_id = 0, None

    def decode(self, ids, skip_special_tokens=True) -> str:
        return ""


def random_model(shape: str, attn: str, device: str):
    import torch

    from studies.random_models import config as random_config
    from studies.random_models import random_model

    config = random_config(
        "llama", max_position_embeddings=131072, rope_theta=500000.0, bos_token_id=128000, **SHAPES[shape]
    )
    config.eos_token_id = config.pad_token_id = None
    model = random_model(config, dtype=torch.bfloat16, device=device, attn=attn)
    model.generation_config.eos_token_id = None
    return model


def setup(contender: str, prompt: int, shape: str, attn: str) -> runner.Work:
    """Building the model, or the generation of ``<n> new tokens`` after a ``prompt``-token prompt."""
    import torch

    from pipeline.loogle.generation.decoding import Cut, generate

    if contender == BUILD:
        from pipeline.models import attention  # noqa: F401  (registers blocked_sdpa in this process)

        device = "cpu" if shape == "tiny" else "cuda"
        return lambda: LOADED.update(model=random_model(shape, attn, device))
    model, new = LOADED["model"], int(contender.split()[0])
    ids = torch.randint(0, 128000, (prompt,), generator=torch.Generator().manual_seed(1)).tolist()
    if not LOADED.get("warm"):
        generate(model, Tokenizer(), Cut(ids[:512], 512, 0), 4)  # warm-up: kernels and allocator
        LOADED["warm"] = True
    return lambda: generate(model, Tokenizer(), Cut(ids, prompt, 0), new)


def contenders(shape: str) -> list[str]:
    return [BUILD, *(f"{n} new tokens" for n in ((1, 9) if shape == "tiny" else (1, 129, 513)))]


CASE = runner.Case(
    "loogle_decode",
    contenders=(BUILD, *contenders("llama3.1-8b")[1:]),
    sizes=(32000,),
    setup=setup,
    together=True,
)


def main() -> None:
    if runner.child(CASE):
        return
    from pipeline.models import attention

    parser = shared.arguments(__doc__)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama3.1-8b")
    parser.add_argument("--attn", default=attention.NAME)
    parser.add_argument("--prompt", type=int, help="prompt tokens (default 32000; 2000 for --shape tiny)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    prompt = args.prompt or (2000 if args.shape == "tiny" else 32000)
    rows = runner.run(CASE, contenders=contenders(args.shape), sizes=[prompt],
                      options={"shape": args.shape, "attn": args.attn}, strict=True)  # fmt: skip
    times = {int(r["contender"].split()[0]): r["work"]["seconds"] for r in rows[1:]}
    first, last = min(times), max(times)
    machine = runner.machine()
    out = {
        "device": "cpu" if args.shape == "tiny" else machine.get("gpu"),
        "torch": machine["torch"],
        "transformers": machine["transformers"],
        "prompt_tokens": prompt,
        "attn_implementation": args.attn,
        "init_s": round(rows[0]["work"]["seconds"], 2),
        "seconds_by_new_tokens": {str(k): round(v, 3) for k, v in times.items()},
        "decode_ms_per_token": round(1000 * (times[last] - times[first]) / (last - first), 2),
        "peak_gib": round(max(r["work"]["peak_bytes"] for r in rows) / shared.GIB, 2)
        if args.shape != "tiny"
        else None,
    }
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
