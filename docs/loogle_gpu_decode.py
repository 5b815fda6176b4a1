"""LooGLE's generation (pipeline.loogle.generation.generate: greedy, repetition_penalty=2.0) of a model of
Llama-3.1-8B's shape with random bfloat16 weights on one GPU: the prefill of a 32,000-token prompt and the
time per new token (docs/loogle.md). Run from the repository root: `python docs/loogle_gpu_decode.py`;
ATTN=sdpa for another attention implementation, SHAPE=tiny for a dry run on the CPU, OUT=<dir> to save."""

import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, os.getcwd())
from transformers import AutoModelForCausalLM, LlamaConfig

import pipeline.models.attention as attention
from pipeline.loogle.generation import Cut, generate

tiny = os.environ.get("SHAPE") == "tiny"
device = "cpu" if tiny else "cuda"
shape = (
    dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    if tiny
    else dict(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
    )
)
config = LlamaConfig(
    vocab_size=128256,
    max_position_embeddings=131072,
    rope_theta=500000.0,
    rms_norm_eps=1e-5,
    bos_token_id=128000,
    eos_token_id=None,
    pad_token_id=None,
    tie_word_embeddings=False,
    **shape,
)
config._attn_implementation = os.environ.get("ATTN", attention.NAME)
torch.manual_seed(0)
start = time.perf_counter()
with torch.device(device):
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
model.generation_config.eos_token_id = None
init_s = time.perf_counter() - start


class Tokenizer:
    pad_token_id, eos_token_id = 0, None

    def decode(self, ids, skip_special_tokens=True):
        return ""


def sync():
    if device == "cuda":
        torch.cuda.synchronize()


prompt = int(os.environ.get("PROMPT", 2000 if tiny else 32000))
ids = torch.randint(0, 128000, (prompt,), generator=torch.Generator().manual_seed(1)).tolist()
generate(model, Tokenizer(), Cut(ids[:512], 512, 0), 4)  # warm-up
times = {}
for new in (1, 129, 513) if not tiny else (1, 9):
    sync()
    t = time.perf_counter()
    generate(model, Tokenizer(), Cut(ids, prompt, 0), new)
    sync()
    times[new] = time.perf_counter() - t
first, last = min(times), max(times)
out = {
    "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
    "torch": torch.__version__,
    "transformers": __import__("transformers").__version__,
    "prompt_tokens": prompt,
    "attn_implementation": config._attn_implementation,
    "init_s": round(init_s, 2),
    "seconds_by_new_tokens": {str(k): round(v, 3) for k, v in times.items()},
    "decode_ms_per_token": round(1000 * (times[last] - times[first]) / (last - first), 2),
    "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device == "cuda" else None,
}
print(json.dumps(out))
if os.environ.get("OUT"):
    Path(os.environ["OUT"], "decode.json").write_text(json.dumps(out) + "\n")
