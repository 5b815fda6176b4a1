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
is cut) at 1 and ``--new`` new tokens each way, after every path ran once at the full prompt length
(``warm_up``, its seconds recorded): prefill and per-step seconds, tokens per second, the whole
benchmark's hours recomputed from them (``cost``), a question's own half against a whole prefill, and
each step against its memory-bandwidth floor (``step_floor``: the bytes of weights and keys and values
a step reads over ``--bandwidth``, by default the GPU's: 4.8 TB/s on an H200).
"""

from __future__ import annotations

import json
import os
from typing import Any

from bench import runner, shared
from studies.random_models import LLAMA31_SHAPES as SHAPES

BUILD = "build the model"
WARM = "warm up at the full prompt length"
BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12}  # bytes/s of HBM, by the GPU's name (H100: the SXM card's)
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
    contender: str, prompt: int, shape: str, attn: str, questions: int, question: int, new: int,
    bandwidth: float | None,
) -> runner.Work:  # fmt: skip
    """Building the model, or ``<way> <fits|cut> <n>``: one question alone (LooGLE's loop) or the
    document's questions together, at ``n`` new tokens."""
    from pipeline.loogle.generation.batched import decode_document
    from pipeline.loogle.generation.decoding import generate

    if contender == BUILD:
        from pipeline.models import attention  # noqa: F401  (registers blocked_sdpa in this process)

        device = "cpu" if shape == "tiny" else "cuda"
        return lambda: LOADED.update(model=random_model(shape, attn, device))
    model = LOADED["model"]
    if contender == WARM:
        shared_tokens = {"fits": prompt - question, "cut": prompt // 2}
        gpu = runner.machine().get("gpu", "")
        rate = bandwidth or next((b for name, b in BANDWIDTH.items() if name in gpu), None)
        floors = {
            kind: step_floor(model, prompt, questions, n, new, rate) for kind, n in shared_tokens.items()
        }
        return lambda: {
            "warm_up_s": warm_up(model, prompt, questions, question),
            "floor": floors if rate else None,
        }
    way, kind, new = contender.rsplit(" ", 2)
    cuts = document(prompt, questions, prompt - question if kind == "fits" else prompt // 2)
    if way == WAYS[0]:
        return lambda: generate(model, Tokenizer(), cuts[0], int(new))
    return lambda: decode_document(model, Tokenizer(), cuts, int(new), questions, lambda *a: None)


def warm_up(model: Any, prompt: int, questions: int, question: int) -> dict[str, float]:
    """Every timed path once at the full prompt length, 3 new tokens each, before any is timed (kernels
    chosen, the allocator's pool grown at the shapes the runs use): one question alone, the document's
    questions together with the prompt fitting, two of them with it cut. Its seconds, by part: a first
    run's costs that later runs do not pay show here, not in the measured steps. (An earlier version
    warmed up at 256 tokens only: on the H200 the four runs timed first took 107 ms per step, those
    after them 29 ms, the same shapes.)"""
    from pipeline.loogle.generation.batched import decode_document
    from pipeline.loogle.generation.decoding import generate

    fits, cut = document(prompt, questions, prompt - question), document(prompt, 2, prompt // 2)
    parts = {
        "alone": lambda: generate(model, Tokenizer(), fits[0], 3),
        "together, prompt fits": lambda: decode_document(
            model, Tokenizer(), fits, 3, questions, lambda *a: None
        ),
        "together, prompt cut": lambda: decode_document(model, Tokenizer(), cut, 3, 2, lambda *a: None),
    }
    seconds = {}
    for name, part in parts.items():
        with runner.Clock(sync=runner.cuda_sync) as clock:
            part()
        seconds[name] = round(clock.seconds, 3)
    return seconds


def step_floor(
    model: Any, prompt: int, questions: int, shared: int, new: int, bandwidth: float | None
) -> dict:
    """A decode step's memory-bandwidth floor at mid-answer (``prompt + new / 2`` tokens per sequence):
    the bytes every step must read (the weights, and each sequence's keys and values) over the device's
    ``bandwidth`` (bytes/s), in ms. ``together``: the batch as it is laid out (every row holds its own
    copy of the ``shared`` prompt tokens); ``together, shared read once``: a layout that reads them once."""
    config = model.config
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_token = config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim * 2  # bf16 K and V
    tokens = prompt + new // 2
    reads = {"alone": tokens, "together": questions * tokens, "together, shared read once":
             shared + questions * (tokens - shared)}  # fmt: skip
    if bandwidth is None:
        return {}
    return {
        "weights_gb": round(weights / 1e9, 2),
        "kv_bytes_per_token": per_token,
        "bandwidth_tb_s": bandwidth / 1e12,
        **{f"{name}_ms": round(1e3 * (weights + n * per_token) / bandwidth, 2) for name, n in reads.items()},
    }


def gpu_contenders(new: int) -> list[str]:
    return [BUILD, WARM, *(f"{way} {kind} {n}" for kind in ("fits", "cut") for way in WAYS for n in (1, new))]


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
    """Each way's prefill and step, the benchmark's hours by the cost model, the warm-up's seconds, and
    the steps against their memory-bandwidth floor (``step_floor``, where the device's bandwidth is
    known)."""
    seconds = {r["contender"]: r["work"]["seconds"] for r in rows}
    out: dict[str, Any] = {"build_s": round(seconds[BUILD], 2), "seconds": seconds}
    warm = next(r for r in rows if r["contender"] == WARM)
    out["warm_up_s"], floor = warm["warm_up_s"], warm.get("floor")
    for kind in ("fits", "cut"):
        out[kind] = per_step(seconds, kind, new, questions)
    out["benchmark_hours"] = cost(out["cut"], questions)
    own = out["benchmark_hours"]["own_half_prefill_s"] / out["cut"]["alone_prefill_s"]
    out["own_half_of_a_whole_prefill"] = round(own, 3)
    if floor:
        for kind in ("fits", "cut"):
            for way in ("alone", "together"):
                floor[kind][f"{way}_over_floor"] = round(
                    1e3 * out[kind][f"{way}_step_s"] / floor[kind][f"{way}_ms"], 2
                )
        out["floor"] = floor
    out["peak_gib"] = round(max(r["work"]["peak_bytes"] for r in rows) / shared.GIB, 2)
    return out


def section(result: dict) -> list[str]:
    """The GPU report's section (``bench.gpu_report``): each way's prefill and step, a question's own half
    against a whole prefill, the steps against their floor, the benchmark's hours by the cost model."""
    m, cut, fits = result["machine"], result["cut"], result["fits"]
    lines = [
        f"## LooGLE's decoding: {result['questions']} questions of one {result['prompt_tokens']:,}-token "
        f"document, {result['new_tokens']} new tokens",
        "",
        f"{m.get('gpu', 'CPU only')}, torch {m['torch']}, transformers {m['transformers']}, commit "
        f"{m.get('commit')}, {m['date']}; the {result['shape']} shape, random bfloat16 weights. "
        "`python -m bench.loogle_decode` (run by `bash bench/gpu_machine.sh 1`).",
        "",
        "| | prompt fits | prompt cut |",
        "|---|---:|---:|",
        f"| one question alone: prefill s | {fits['alone_prefill_s']:.2f} | {cut['alone_prefill_s']:.2f} |",
        f"| {result['questions']} questions together: prefill s | {fits['together_prefill_s']:.2f} | "
        f"{cut['together_prefill_s']:.2f} |",
        f"| a decode step alone, ms | {1e3 * fits['alone_step_s']:.1f} | {1e3 * cut['alone_step_s']:.1f} |",
        f"| a decode step together, ms | {1e3 * fits['together_step_s']:.1f} | {1e3 * cut['together_step_s']:.1f} |",
    ]
    floor = result.get("floor")
    if floor:
        for way in ("alone", "together", "together, shared read once"):
            lines.append(
                f"| its memory-bandwidth floor, {way}, ms | {floor['fits'][way + '_ms']} | {floor['cut'][way + '_ms']} |"
            )
    hours = result["benchmark_hours"]
    own = (cut["together_prefill_s"] - cut["alone_prefill_s"]) / (result["questions"] - 1)  # as ``cost``
    lines += [
        "",
        f"A question's own half after the cached shared half (prompt cut): {own:.2f} s, "
        f"{own / cut['alone_prefill_s']:.2f}x a whole prefill. The whole benchmark by the cost model: {hours['one_at_a_time_h']} GPU-hours "
        f"one question at a time, {hours['together_h']} together.",
    ]
    if result.get("warm_up_s"):
        lines += ["", f"Warm-up at the full prompt length, seconds: {json.dumps(result['warm_up_s'])}."]
    else:
        lines += ["", "Warmed up at 256 tokens only (the bench before the full-length warm-up)."]
    return [*lines, ""]


def setup(contender: str, size: Any, **options: Any) -> runner.Work:
    if options["part"] == "sample":
        return sample_work(contender, size, options["tasks"], options["limit"], options["batch_size"])
    return gpu_work(contender, size, options["shape"], options["attn"], options["questions"], options["question"],
                    options["new"], options["bandwidth"])  # fmt: skip


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
    parser.add_argument(
        "--bandwidth",
        type=shared.above(0),
        help="the device's memory bandwidth, TB/s (default: by the GPU's name)",
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
            bandwidth = args.bandwidth * 1e12 if args.bandwidth else None
            options = {"part": "gpu", "shape": args.shape, "attn": args.attn, "questions": args.questions,
                       "question": args.question, "new": args.new, "bandwidth": bandwidth}  # fmt: skip
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
