"""LooGLE's decoding two ways, side by side in one run: one question at a time (LooGLE's own loop:
``pipeline.loogle.generation.decoding.generate``, transformers' ``generate``) against a document's
questions together (``pipeline.loogle.generation.answering.answer``: the shared prompt tokens once,
batches of ``--batch-size``; docs/loogle.md).

    python -m bench.loogle_decode cpu --json out.json          # the embedded models on the sample
    python -m bench.loogle_decode cpu --models smollm2-135m --tasks longdep_qa --limit 3   # a subset
    python -m bench.loogle_decode gpu --json out.json          # Llama-3.1-8B's shape, random bf16, 32k prompts
    python -m bench.loogle_decode gpu --shape tiny             # its dry run on the CPU

``cpu``: wall and CPU seconds per question of each way (the machine is shared: CPU seconds are the
steadier), whether the answers are the same word for word, and where they are not the step and the
one-at-a-time top-two margin of the first token that differs. ``gpu``: one document of ``--questions``
prompts of ``--prompt`` tokens (the whole prompt shared but each question's ``--question`` tokens, or
only its first half: a cut prompt) at 1 and ``--new`` new tokens each way: prefill and per-step
seconds, tokens per second, and the whole benchmark's cost recomputed from them (``cost``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from bench.harness import machine, stamp, synced
from studies.random_models import LLAMA31_SHAPES as SHAPES

# LooGLE's questions per task (the paper's Table 2), the new tokens LooGLE allows each, and the
# questions per document of its published test data (5 documents per task), as a document's batch.
BENCHMARK = {  # task: (questions, new tokens, questions per document)
    "longdep_summarization": (516, 500, 1),
    "shortdep_qa": (1951, 300, 16),
    "longdep_qa": (1101, 500, 9),
    "shortdep_cloze": (2880, 50, 19),
}


def clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def since(start: tuple[float, float]) -> dict[str, float]:
    wall, cpu = clock()
    return {"wall_s": round(wall - start[0], 2), "cpu_s": round(cpu - start[1], 2)}


# ----------------------------------------------------------------------------------------------
# cpu: the embedded models on the embedded sample


def first_flip(reference: list[int], margins: list[float], ids: list[int]) -> dict[str, Any] | None:
    """Where two decodings part: the step and the one-at-a-time top-two margin there."""
    for step, (a, b) in enumerate(zip(reference, ids, strict=False)):
        if a != b:
            return {"step": step, "margin": margins[step]}
    return None if len(reference) == len(ids) else {"step": min(len(reference), len(ids)), "margin": None}


def sample_task(lm: Any, task: str, limit: int | None, batch_size: int) -> dict[str, Any]:
    """One task of the sample both ways for a loaded model: times, equality, flips."""
    from pipeline.loogle.data.prompts import max_new_tokens
    from pipeline.loogle.data.reading import DataSource, load_questions
    from pipeline.loogle.generation.answering import answer, prompt_limit
    from pipeline.loogle.generation.decoding import cut_prompt, generate_ids

    questions = load_questions(task, DataSource())[:limit]
    new = max_new_tokens()[task]
    cuts = {
        q.qid: cut_prompt(lm.tokenizer, q, prompt_limit(lm.context_length, None, new, task))
        for q in questions
    }
    start, one = clock(), {}
    for q in questions:
        one[q.qid] = generate_ids(lm.model, lm.tokenizer, cuts[q.qid], new, margins=True)
    alone = since(start)
    start, together = clock(), {}
    answer(lm, questions, cuts, new, batch_size, lambda q, found: together.__setitem__(q.qid, found))
    shared = since(start)
    flips = {qid: first_flip(*one[qid], together[qid].ids) for qid in one}
    texts = {qid: lm.tokenizer.decode(one[qid][0], skip_special_tokens=True) for qid in one}
    return {
        "task": task, "questions": len(questions), "new_tokens_allowed": new,
        "prompt_cut": sum(c.cut_tokens > 0 for c in cuts.values()),
        "new_tokens": sum(len(one[qid][0]) for qid in one),
        "one_at_a_time": alone, "shared_batched": shared,
        "same_words": sum(texts[qid] == together[qid].text for qid in one),
        "flips": {qid: flip for qid, flip in flips.items() if flip is not None},
    }  # fmt: skip


def cpu(args: argparse.Namespace) -> dict[str, Any]:
    from pipeline.models.loading import ModelChoice
    from pipeline.settings import Compute

    out: dict[str, Any] = {"load_before": os.getloadavg(), "batch_size": args.batch_size, "models": {}}
    for spec in args.models:
        lm = ModelChoice(spec=spec).load(Compute(dtype="float32", device="cpu"))
        out["models"][spec] = [sample_task(lm, t, args.limit, args.batch_size) for t in args.tasks]
        print(json.dumps({spec: out["models"][spec]}), flush=True)
    out["load_after"] = os.getloadavg()
    out["threads"] = torch.get_num_threads()
    return out


# ----------------------------------------------------------------------------------------------
# gpu: Llama-3.1-8B's shape with random weights, one document of 32k-token prompts


class Tokenizer:
    """Enough of a tokenizer for the decoders: no end of text, nothing to decode."""

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


def document(prompt: int, questions: int, question: int, shared: int) -> list[Any]:
    """Cuts of one document: ``shared`` common tokens, then each question's own up to ``prompt``."""
    from pipeline.loogle.generation.decoding import Cut

    generator = torch.Generator().manual_seed(1)
    common = torch.randint(0, 128000, (shared,), generator=generator).tolist()
    own = prompt - shared
    cuts = []
    for _ in range(questions):
        ids = common + torch.randint(0, 128000, (own,), generator=generator).tolist()
        cuts.append(Cut(ids, len(ids), 0))
    assert own >= question
    return cuts


def both_ways(model: Any, cuts: list[Any], new: int, batch: int, sync: Any) -> dict[str, float]:
    """Seconds of one question alone (LooGLE's loop) and of all of them together, at ``new`` tokens."""
    from pipeline.loogle.generation.batched import decode_document
    from pipeline.loogle.generation.decoding import generate

    alone, _ = synced(lambda: generate(model, Tokenizer(), cuts[0], new), sync)
    together, _ = synced(lambda: decode_document(model, Tokenizer(), cuts, new, batch, lambda *a: None), sync)
    return {"one_question_alone_s": round(alone, 3), "document_together_s": round(together, 3)}


def per_step(at: dict[int, dict[str, float]], first: int, last: int, questions: int) -> dict[str, float]:
    """Prefill and per-token seconds of each way from the runs at ``first`` and ``last`` new tokens."""
    steps = last - first
    alone = (at[last]["one_question_alone_s"] - at[first]["one_question_alone_s"]) / steps
    together = (at[last]["document_together_s"] - at[first]["document_together_s"]) / steps
    return {
        "alone_prefill_s": at[first]["one_question_alone_s"], "alone_step_s": alone,
        "together_prefill_s": at[first]["document_together_s"], "together_step_s": together,
        "alone_tokens_per_s": 1 / alone, "together_tokens_per_s": questions / together,
    }  # fmt: skip


def cost(cut: dict[str, float], questions: int) -> dict[str, float]:
    """The whole benchmark's hours with every answer at its full length and every prompt cut (the
    upper bound: most of LooGLE's documents fill the prompt). One at a time (LooGLE's loop): a whole
    prefill and the steps per question. Together: per document the shared half once, each question's
    own half (``own``: from the two prefills measured), and per batch of at most ``questions`` the steps
    at the measured batch's cost (a smaller batch is charged as a full one)."""
    own = (cut["together_prefill_s"] - cut["alone_prefill_s"]) / (questions - 1)
    half = cut["alone_prefill_s"] - own
    alone = together = 0.0
    for n, new, per_doc in BENCHMARK.values():
        alone += n * (cut["alone_prefill_s"] + (new - 1) * cut["alone_step_s"])
        documents, batches = n / per_doc, -(-per_doc // questions)
        together += documents * (half + per_doc * own + batches * (new - 1) * cut["together_step_s"])
    return {"one_at_a_time_h": round(alone / 3600, 2), "shared_batched_h": round(together / 3600, 2),
            "own_half_prefill_s": round(own, 3), "shared_half_prefill_s": round(half, 3)}  # fmt: skip


def gpu(args: argparse.Namespace) -> dict[str, Any]:
    from pipeline.loogle.generation.decoding import Cut
    from pipeline.models import attention

    device = "cpu" if args.shape == "tiny" else "cuda"
    sync = torch.cuda.synchronize if device == "cuda" else None
    prompt = args.prompt or (2000 if args.shape == "tiny" else 32000)
    model = random_model(args.shape, args.attn or attention.NAME, device)
    first, last = 1, args.new
    out: dict[str, Any] = {"prompt_tokens": prompt, "questions": args.questions, "new_tokens": last}
    for name, shared in (("fits", prompt - args.question), ("cut", prompt // 2)):
        cuts = document(prompt, args.questions, args.question, shared)
        both_ways(model, [Cut(c.ids[-256:], 256, 0) for c in cuts], 2, args.questions, sync)  # warm-up
        at = {n: both_ways(model, cuts, n, args.questions, sync) for n in (first, last)}
        out[name] = {"shared_tokens": shared, **{str(n): v for n, v in at.items()},
                     **per_step(at, first, last, args.questions)}  # fmt: skip
    out["benchmark_hours"] = cost(out["cut"], args.questions)
    out["device"] = torch.cuda.get_device_name(0) if device == "cuda" else "cpu (dry run)"
    out["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2) if device == "cuda" else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="part", required=True)
    c = sub.add_parser("cpu", help="the embedded models on the sample, both ways")
    c.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    c.add_argument("--tasks", nargs="+", default=["shortdep_qa", "longdep_qa"])
    c.add_argument("--limit", type=int, help="the first N questions of each task (default: all)")
    c.add_argument("--batch-size", type=int, default=8)
    g = sub.add_parser("gpu", help="Llama-3.1-8B's shape at 32k prompts, both ways")
    g.add_argument("--shape", choices=sorted(SHAPES), default="llama3.1-8b")
    g.add_argument("--attn", help="attention implementation (default: the pipeline's)")
    g.add_argument("--prompt", type=int, help="prompt tokens (default 32000; 2000 for --shape tiny)")
    g.add_argument("--questions", type=int, default=8, help="questions of the document, decoded as one batch")
    g.add_argument(
        "--question", type=int, default=64, help="each question's own tokens where the prompt fits"
    )
    g.add_argument("--new", type=int, default=129, help="new tokens of the longer runs")
    for p in (c, g):
        p.add_argument("--json", type=Path)
    args = parser.parse_args()
    out = {"bench": f"loogle_decode {args.part}", **(cpu(args) if args.part == "cpu" else gpu(args))}
    out |= {"machine": machine(), "stamp": stamp(), "torch": torch.__version__}
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
