"""LooGLE's decoding two ways, side by side in one run: one question at a time (LooGLE's own loop:
``pipeline.loogle.generation.decoding.generate``, transformers' ``generate``) against a document's
questions together (``pipeline.loogle.generation.answering.answer``: their shared prompt tokens once,
batches of ``--batch-size``; docs/loogle.md).

    make bench-loogle-decode                                 # on a GPU: Llama-3.1-8B's shape, random bf16, 32k prompts
    make bench-loogle-decode ARGS="--shape tiny"             # its dry run on the CPU (2000 tokens, 1 and 9 new)
    make bench-loogle-decode ARGS="--sample"                 # the embedded models on the embedded sample, CPU
    make bench-loogle-decode ARGS="--sample --tasks longdep_qa --limit 3"   # a subset of it

``--sample`` (a process per model, both ways in it): wall and CPU seconds of each way (the machine is
shared: CPU seconds are the steadier), whether the answers are the same word for word, and where they
are not the step and the one-at-a-time top-two margin of the first token that differs. The GPU run (a
process, the model built once): one document of ``--questions`` prompts of ``--prompt`` tokens, their
first tokens shared (all but ``--question`` own tokens where the prompt fits; the first half where it
is cut) at 1 and ``--new`` new tokens each way: prefill and per-step seconds, tokens per second, and
the whole benchmark's hours recomputed from them (``cost``).
"""

from __future__ import annotations

import json
import os
from typing import Any

from bench import runner, shared
from studies.random_models import LLAMA31_SHAPES as SHAPES

BUILD = "build the model"
WAYS = ("one at a time", "together")
LOADED: dict[str, Any] = {}  # what the contenders share in their process: the model
# LooGLE's questions per task (the paper's Table 2), the new tokens LooGLE allows each, and the questions
# per document of its published test data (5 documents per task), as a document's batch.
BENCHMARK = {  # task: (questions, new tokens, questions per document)
    "longdep_summarization": (516, 500, 1),
    "shortdep_qa": (1951, 300, 16),
    "longdep_qa": (1101, 500, 9),
    "shortdep_cloze": (2880, 50, 19),
}


class Tokenizer:
    """Enough of a tokenizer for the decoders: no end of text, nothing to decode."""

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


# ----------------------------------------------------------------------------------------------
# The embedded models on the embedded sample (--sample)


def sample_work(way: str, spec: str, tasks: list[str], limit: int | None, batch_size: int) -> runner.Work:
    """One way over the sample's ``tasks`` for the embedded model ``spec``: each answer's token ids,
    and one at a time each step's top-two margin."""
    from pipeline.loogle.data.prompts import max_new_tokens
    from pipeline.loogle.data.reading import DataSource, load_questions
    from pipeline.loogle.generation.answering import answer, prompt_limit
    from pipeline.loogle.generation.decoding import cut_prompt, generate_ids
    from pipeline.models.loading import ModelChoice
    from pipeline.settings import Compute

    if LOADED.get("spec") != spec:
        LOADED.update(spec=spec, lm=ModelChoice(spec=spec).load(Compute(dtype="float32", device="cpu")))
    lm = LOADED["lm"]
    jobs = []
    for task in tasks:
        new = max_new_tokens()[task]
        questions = load_questions(task, DataSource())[:limit]
        cuts = {
            q.qid: cut_prompt(lm.tokenizer, q, prompt_limit(lm.context_length, None, new, task))
            for q in questions
        }
        jobs.append((questions, cuts, new))

    def work() -> dict[str, Any]:
        out: dict[str, Any] = {"answers": {}, "margins": {}, "questions": 0, "cut": 0}
        for questions, cuts, new in jobs:
            out["questions"] += len(questions)
            out["cut"] += sum(c.cut_tokens > 0 for c in cuts.values())
            if way == WAYS[0]:
                for q in questions:
                    out["answers"][key(q)], out["margins"][key(q)] = generate_ids(
                        lm.model, lm.tokenizer, cuts[q.qid], new, True
                    )
            else:
                answer(
                    lm,
                    questions,
                    cuts,
                    new,
                    batch_size,
                    lambda q, found: out["answers"].__setitem__(key(q), found.ids),
                )
        return out

    return work


def key(question: Any) -> str:
    """A question's key among the sample's tasks: its task and id (a document's id repeats across tasks)."""
    return f"{question.task} {question.qid}"


def first_flip(reference: list[int], margins: list[float], ids: list[int]) -> dict[str, Any] | None:
    """Where two decodings part: the step and the one-at-a-time top-two margin there."""
    for step, (a, b) in enumerate(zip(reference, ids, strict=False)):
        if a != b:
            return {"step": step, "margin": margins[step]}
    return None if len(reference) == len(ids) else {"step": min(len(reference), len(ids)), "margin": None}


def sample_summary(rows: list[dict]) -> dict[str, Any]:
    """Per model: each way's wall and CPU seconds (and per question), the answers the same token for
    token, and the flips."""
    out = {}
    for spec in dict.fromkeys(r["size"] for r in rows):
        alone, together = ({**r} for way in WAYS for r in rows if r["size"] == spec and r["contender"] == way)
        flips = {
            q: first_flip(alone["answers"][q], alone["margins"][q], ids)
            for q, ids in together["answers"].items()
        }
        n = alone["questions"]
        if not len(alone["answers"]) == len(together["answers"]) == n:
            raise RuntimeError(f"{spec}: {n} questions but {len(alone['answers'])} and "
                               f"{len(together['answers'])} answers: two questions share a key")  # fmt: skip
        out[spec] = {
            "questions": n, "prompt_cut": alone["cut"],
            "new_tokens": sum(len(ids) for ids in alone["answers"].values()),
            **{way: {"wall_s": round(r["work"]["seconds"], 1), "cpu_s": round(r["work"]["cpu_s"], 1),
                     "wall_s_per_question": round(r["work"]["seconds"] / n, 1),
                     "cpu_s_per_question": round(r["work"]["cpu_s"] / n, 1),
                     "peak_gib": round(r["work"]["peak_bytes"] / shared.GIB, 2)}
               for way, r in zip(WAYS, (alone, together), strict=True)},
            "same_tokens": sum(f is None for f in flips.values()),
            "flips": {q: f for q, f in flips.items() if f is not None},
        }  # fmt: skip
    return out


# ----------------------------------------------------------------------------------------------
# Llama-3.1-8B's shape with random weights (the GPU run, or its tiny dry run)


def document(prompt: int, questions: int, shared_tokens: int) -> list[Any]:
    """Cuts of one document: ``shared_tokens`` common tokens, then each question's own up to ``prompt``."""
    import torch

    from pipeline.loogle.generation.decoding import Cut

    generator = torch.Generator().manual_seed(1)
    common = torch.randint(0, 128000, (shared_tokens,), generator=generator).tolist()
    own = [
        torch.randint(0, 128000, (prompt - shared_tokens,), generator=generator).tolist()
        for _ in range(questions)
    ]
    return [Cut(common + ids, prompt, 0) for ids in own]


def gpu_work(
    contender: str, prompt: int, shape: str, attn: str, questions: int, question: int
) -> runner.Work:
    """Building the model, or ``<way> <fits|cut> <n>``: one question alone (LooGLE's loop) or the
    document's questions together, at ``n`` new tokens."""
    from pipeline.loogle.generation.batched import decode_document
    from pipeline.loogle.generation.decoding import generate

    if contender == BUILD:
        from pipeline.models import attention  # noqa: F401  (registers blocked_sdpa in this process)

        device = "cpu" if shape == "tiny" else "cuda"
        return lambda: LOADED.update(model=random_model(shape, attn, device))
    way, kind, new = contender.rsplit(" ", 2)
    model = LOADED["model"]
    cuts = document(prompt, questions, prompt - question if kind == "fits" else prompt // 2)
    if not LOADED.get("warm"):
        decode_document(
            model,
            Tokenizer(),
            [c.__class__(c.ids[-256:], 256, 0) for c in cuts],
            2,
            questions,
            lambda *a: None,
        )  # fmt: skip  (warm-up: kernels and allocator)
        LOADED["warm"] = True
    if way == WAYS[0]:
        return lambda: generate(model, Tokenizer(), cuts[0], int(new))
    return lambda: decode_document(model, Tokenizer(), cuts, int(new), questions, lambda *a: None)


def gpu_contenders(new: int) -> list[str]:
    return [BUILD, *(f"{way} {kind} {n}" for kind in ("fits", "cut") for way in WAYS for n in (1, new))]


def per_step(seconds: dict[str, float], kind: str, new: int, questions: int) -> dict[str, float]:
    """Prefill and per-token seconds of each way from its runs at 1 and ``new`` new tokens."""
    out: dict[str, float] = {}
    for way, name in zip(WAYS, ("alone", "together"), strict=True):
        first, last = seconds[f"{way} {kind} 1"], seconds[f"{way} {kind} {new}"]
        out[f"{name}_prefill_s"], out[f"{name}_step_s"] = first, (last - first) / (new - 1)
    out["alone_tokens_per_s"] = 1 / out["alone_step_s"]
    out["together_tokens_per_s"] = questions / out["together_step_s"]
    return out


def cost(cut: dict[str, float], questions: int) -> dict[str, float]:
    """The whole benchmark's hours with every answer at its full length and every prompt cut (the upper
    bound: most of LooGLE's documents fill the prompt). One at a time (LooGLE's loop): a whole prefill
    and the steps per question. Together: per document the shared half once, each question's own half
    (``own``: from the two prefills measured), and per batch of at most ``questions`` the steps at the
    measured batch's cost (a smaller batch is charged as a full one); documents of one question (the
    summaries) in batches of their own, each prompt whole."""
    own = (cut["together_prefill_s"] - cut["alone_prefill_s"]) / (questions - 1)
    half = cut["alone_prefill_s"] - own
    alone = together = 0.0
    for n, new, per_doc in BENCHMARK.values():
        alone += n * (cut["alone_prefill_s"] + (new - 1) * cut["alone_step_s"])
        if per_doc == 1:
            together += n * cut["alone_prefill_s"] + -(-n // questions) * (new - 1) * cut["together_step_s"]
            continue
        documents, batches = n / per_doc, -(-per_doc // questions)
        together += documents * (half + per_doc * own + batches * (new - 1) * cut["together_step_s"])
    return {"one_at_a_time_h": round(alone / 3600, 2), "together_h": round(together / 3600, 2),
            "own_half_prefill_s": round(own, 3), "shared_half_prefill_s": round(half, 3)}  # fmt: skip


def gpu_summary(rows: list[dict], new: int, questions: int) -> dict[str, Any]:
    seconds = {r["contender"]: r["work"]["seconds"] for r in rows}
    out: dict[str, Any] = {"build_s": round(seconds[BUILD], 2), "seconds": seconds}
    for kind in ("fits", "cut"):
        out[kind] = per_step(seconds, kind, new, questions)
    out["benchmark_hours"] = cost(out["cut"], questions)
    out["peak_gib"] = round(max(r["work"]["peak_bytes"] for r in rows) / shared.GIB, 2)
    return out


def setup(contender: str, size: Any, **options: Any) -> runner.Work:
    if options["part"] == "sample":
        return sample_work(contender, size, options["tasks"], options["limit"], options["batch_size"])
    return gpu_work(
        contender, size, options["shape"], options["attn"], options["questions"], options["question"]
    )


CASE = runner.Case("loogle_decode", contenders=tuple(gpu_contenders(129)), sizes=(32000,), setup=setup,
                   together=True)  # fmt: skip


def parsed() -> Any:
    """The command line, every value checked before any case runs (``--questions 0`` or ``--prompt 3``
    would fail inside a case, after the model is built): one ``error:`` line each."""
    from pipeline.loogle.data.questions import TASKS
    from pipeline.models import attention

    parser = shared.arguments(__doc__)
    parser.add_argument("--sample", action="store_true", help="the embedded models on the embedded sample")
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=["shortdep_qa", "longdep_qa"])
    parser.add_argument(
        "--limit", type=shared.whole(1), help="the first N questions of each task (default: all)"
    )
    parser.add_argument("--batch-size", type=shared.whole(1), default=8)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama3.1-8b")
    parser.add_argument("--attn", default=attention.NAME)
    parser.add_argument(
        "--prompt", type=shared.whole(2), help="prompt tokens (default 32000; 2000 for --shape tiny)"
    )
    parser.add_argument(
        "--questions", type=shared.whole(2), default=8, help="questions of the document, one batch"
    )
    parser.add_argument(
        "--question", type=shared.whole(1), default=64, help="each question's own tokens where it fits"
    )
    parser.add_argument(
        "--new", type=shared.whole(2), help="new tokens of the longer runs (default 129; 9 for --shape tiny)"
    )
    parser.add_argument("--json", type=shared.output_file)
    args = parser.parse_args()
    tiny = args.shape == "tiny"
    args.prompt, args.new = args.prompt or (2000 if tiny else 32000), args.new or (9 if tiny else 129)
    if not args.sample and args.prompt <= args.question:
        parser.error(
            f"--prompt {args.prompt} leaves no shared tokens before --question {args.question}'s own"
        )
    return args


def main() -> None:
    if runner.child(CASE):
        return
    from pipeline.errors import one_line_errors
    from pipeline.models.loading import ModelChoice

    with one_line_errors():
        args = parsed()
        for spec in args.models if args.sample else []:
            ModelChoice(spec=spec).check()  # before the cases: a spec that cannot load, in one line
        load = os.getloadavg()  # the machine's load (1, 5 and 15 minutes) before and after: a shared one's
        if args.sample:
            options = {
                "part": "sample",
                "tasks": args.tasks,
                "limit": args.limit,
                "batch_size": args.batch_size,
            }
            rows = runner.run(CASE, contenders=WAYS, sizes=args.models, options=options, strict=True)
            out = {"sample": sample_summary(rows), **options}
        else:
            options = {"part": "gpu", "shape": args.shape, "attn": args.attn, "questions": args.questions,
                       "question": args.question}  # fmt: skip
            rows = runner.run(CASE, contenders=gpu_contenders(args.new), sizes=[args.prompt], options=options,
                              strict=True)  # fmt: skip
            out = {
                **gpu_summary(rows, args.new, args.questions),
                **options,
                "prompt_tokens": args.prompt,
                "new_tokens": args.new,
            }
        out |= {"machine": runner.machine(), "stamp": runner.stamp(), "load": [load, os.getloadavg()]}
        print(json.dumps(out))
        if args.json:
            args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
