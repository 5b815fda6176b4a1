"""LooGLE's generation (``pipeline.loogle.generation.decoding.generate``: greedy, repetition_penalty=2.0) by a model
of Llama-3.1-8B's shape with random bfloat16 weights on one GPU: the prefill of a 32,000-token prompt and
the time per new token (docs/loogle.md).

    python -m bench.loogle_decode                 # on a GPU
    python -m bench.loogle_decode --shape tiny    # a dry run on the CPU
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from bench.harness import synced
from studies.random_models import LLAMA31_SHAPES as SHAPES


class Tokenizer:
    """Enough of a tokenizer for ``generate``: no end of text, nothing to decode."""

    pad_token_id, eos_token_id = 0, None

    def decode(self, ids, skip_special_tokens=True) -> str:
        return ""


def random_model(shape: str, attn: str, device: str):
    from studies.random_models import config as random_config
    from studies.random_models import random_model

    config = random_config(
        "llama", max_position_embeddings=131072, rope_theta=500000.0, bos_token_id=128000, **SHAPES[shape]
    )
    config.eos_token_id = config.pad_token_id = None
    model = random_model(config, dtype=torch.bfloat16, device=device, attn=attn)
    model.generation_config.eos_token_id = None
    return model


def main() -> None:
    from pipeline.loogle.generation.decoding import Cut, generate
    from pipeline.models import attention

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama3.1-8b")
    parser.add_argument("--attn", default=attention.NAME)
    parser.add_argument("--prompt", type=int, help="prompt tokens (default 32000; 2000 for --shape tiny)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    device = "cpu" if args.shape == "tiny" else "cuda"
    sync = torch.cuda.synchronize if device == "cuda" else None
    prompt = args.prompt or (2000 if args.shape == "tiny" else 32000)
    start = time.perf_counter()
    model = random_model(args.shape, args.attn, device)
    init_s = time.perf_counter() - start
    ids = torch.randint(0, 128000, (prompt,), generator=torch.Generator().manual_seed(1)).tolist()
    generate(model, Tokenizer(), Cut(ids[:512], 512, 0), 4)  # warm-up
    counts = (1, 9) if args.shape == "tiny" else (1, 129, 513)
    times = {
        n: synced(lambda n=n: generate(model, Tokenizer(), Cut(ids, prompt, 0), n), sync)[0] for n in counts
    }
    first, last = min(times), max(times)
    out = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "prompt_tokens": prompt,
        "attn_implementation": args.attn,
        "init_s": round(init_s, 2),
        "seconds_by_new_tokens": {str(k): round(v, 3) for k, v in times.items()},
        "decode_ms_per_token": round(1000 * (times[last] - times[first]) / (last - first), 2),
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device == "cuda" else None,
    }
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
