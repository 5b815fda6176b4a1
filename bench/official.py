"""This project against the official `longppl` package (0.3.0) and plain perplexity, side by side.

Every contender runs in its own watched process: its resident memory sampled every 50 ms, killed past
the memory cap (recorded as such). Same documents, models, K, d, alpha, beta and dtype for both
implementations, the official conventions throughout: `short_window_bos=false`, `add_bos=false`.
Stage 1 is `make keytokens`' computation of a text (``keytoken_tables``), stage 2 the score engine (``pipeline.score.engine.score``)
on the official key spans, the drop-in ``pipeline.api.dropin.compute_longppl`` called online.

    make bench          # everything: 4k comparisons, stage 2, drop-in compute_longppl, scaling 1k-32k
    make bench-quick    # 4k only, one document
    make bench-official ARGS="--only dropin"   # the drop-in compute_longppl comparison only (its own section)
Writes its sections of docs/reports/benchmarks.md. A run resumes: jobs measured before are read from
artifacts/bench/jobs.jsonl (``--fresh`` measures everything again).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from bench import runner, shared
from bench.report import publish

EVALUATOR, MODEL = "gemma3-270m", "smollm2-135m"
CACHE = Path("artifacts/bench/jobs.jsonl")
STAGE1 = ("stage1-ours", "stage1-official", "stage1-official-our-attention")
STAGE2 = ("stage2-ours", "stage2-plain", "stage2-official")
DROPIN = ("dropin-ours", "dropin-official")


def setup(task: str, size: list, K: int, d: int, spans: list | None = None) -> runner.Work:
    """The models of ``task`` loaded (and warmed up) and its text of ``size`` = (tokens, document)."""
    import torch

    from pipeline.models import attention
    from pipeline.models.loading import load_model

    torch.set_grad_enabled(False)
    official = task.endswith("official") or task.startswith("dropin")
    attn = "sdpa" if official else attention.NAME
    evaluator = load_model(EVALUATOR, dtype="float32", device="cpu", attn_implementation=attn)
    text = shared.sample_text(evaluator.tokenizer, *size)
    if task.startswith("stage1"):
        lm = evaluator
    elif task.startswith("dropin"):  # both models, as the user holds them (default attention)
        lm = (evaluator, load_model(MODEL, dtype="float32", device="cpu", attn_implementation=attn))
    else:
        del evaluator
        lm = load_model(MODEL, dtype="float32", device="cpu", attn_implementation=attn)
    for loaded in lm if isinstance(lm, tuple) else [lm]:  # warm up: every weight paged in before timing
        loaded.model(input_ids=torch.tensor([[1, 2, 3]]))
    return lambda: {"chars": len(text), **TASKS[task](lm, text, K, d, spans)}


def stage1_ours(lm, text: str, K: int, d: int, spans) -> dict:
    """What `make keytokens` computes for one text (its CPU preset's compute settings, read from
    conf/preset/cpu.yaml), with the official convention: the tables of ``keytoken_tables``. (Not
    ``pipeline.api.find_key_tokens``, which also hashes the evaluator's weights for its record.)"""
    from pipeline.definition import KeyTokenDefinition
    from pipeline.files import conf_file
    from pipeline.keytokens.selection import Prepared
    from pipeline.keytokens.tables import keytoken_tables
    from pipeline.models.logprobs import scorer_for
    from pipeline.settings import Compute
    from pipeline.text.corpus import Document
    from pipeline.text.tokenization import encode_with_offsets

    compute = Compute(
        dtype="float32",
        head_dtype="auto",
        window_batch_tokens=conf_file("preset/cpu.yaml")["window_batch_tokens"],
    )
    enc = encode_with_offsets(lm.tokenizer, text)
    item = Prepared(0, Document("bench", text), text, enc.ids, enc.offsets, enc.offsets_from, False)
    definition = KeyTokenDefinition(K=K, d=d, short_window_bos=False)
    _, tokens, spans = keytoken_tables(scorer_for(lm, compute), item, definition, lm.bos_token_id)
    tokens, spans = tokens.to_pydict(), spans.to_pydict()
    return {"spans": list(zip(spans["char_start"], spans["char_end"], strict=True)),
            "lsd": [None if x is None else round(x, 7) for x in tokens["lsd"]],
            "long": [round(x, 7) for x in tokens["long_logprob"]],
            "offsets": list(zip(tokens["char_start"], tokens["char_end"], strict=True))}  # fmt: skip


def stage1_official(lm, text: str, K: int, d: int, spans) -> dict:
    from longppl.longppl import find_key_token

    intervals = find_key_token(text, lm.model, lm.tokenizer, K, d, alpha=2, beta=-2)
    return {"spans": [tuple(map(int, row)) for row in intervals.tolist()]}


def spans_artifact(text: str, spans: list):
    """One text and its key spans as a key_spans artifact in memory (the official stage 2 has no soft
    weights): what the score engine reads."""
    import pyarrow as pa

    from pipeline.artifact.schema import KEY_SPANS, KeyTokenArtifact

    documents = pa.table({"doc_id": ["bench"], "text": [text], "n_tokens": [0], "n_spans": [len(spans)]})
    table = pa.table({"doc_id": ["bench"] * len(spans), "char_start": pa.array([a for a, _ in spans], pa.int32()),
                      "char_end": pa.array([b for _, b in spans], pa.int32())})  # fmt: skip
    manifest = {"kind": KEY_SPANS, "fingerprint": "official-spans", "settings": {}}
    return KeyTokenArtifact(Path("official-spans"), manifest, documents, None, table)


def stage2_ours(lm, text: str, K: int, d: int, spans) -> dict:
    """The score engine's call (`make score`'s) on the official key spans, without BOS."""
    from pipeline.score.engine import score
    from pipeline.settings import Compute, ScoreSettings

    result = score(spans_artifact(text, spans), lm, ScoreSettings(add_bos=False), Compute())
    return {"ppl": result.ppl, "longppl": result.longppl, "n_key": result.corpus["n_key_tokens"]}


def stage2_plain(lm, text: str, K: int, d: int, spans) -> dict:
    import torch

    from pipeline.models.logprobs import TargetScorer, full_context_logprobs
    from pipeline.text.tokenization import encode_with_offsets

    ids = encode_with_offsets(lm.tokenizer, text).ids
    nll = -full_context_logprobs(TargetScorer(lm.model), torch.tensor(ids))[1:]
    return {"ppl": float(math.exp(nll.mean()))}


def official_result(result: dict) -> dict:
    longppl = None if result["longppl"] is None else float(result["longppl"])
    return {"ppl": float(result["ppl"]), "longppl": longppl, "n_key": result["n_key_token"]}


def stage2_official(lm, text: str, K: int, d: int, spans) -> dict:
    import tempfile

    from longppl.longppl import compute_longppl

    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write(";".join(f"[{a}, {b}]" for a, b in spans))
    return official_result(
        compute_longppl(text, lm.model, None, tokenizer=lm.tokenizer, save_path=handle.name)
    )


def dropin(lm, text: str, K: int, d: int, ours: bool) -> dict:
    """``compute_longppl`` online (evaluator and model), as the official package's users call it."""
    from longppl.longppl import compute_longppl as official

    from pipeline.api.dropin import compute_longppl

    evaluator, model = lm
    call = compute_longppl if ours else official
    return official_result(call(text, model.model, evaluator.model, model.tokenizer, evaluator.tokenizer,
                                trunc_len=K, sliding_window=d))  # fmt: skip


TASKS = {"stage1-ours": stage1_ours, "stage1-official": stage1_official,
         "stage1-official-our-attention": stage1_official, "stage2-ours": stage2_ours, "stage2-plain": stage2_plain,
         "stage2-official": stage2_official,
         "dropin-ours": lambda lm, text, K, d, spans: dropin(lm, text, K, d, ours=True),
         "dropin-official": lambda lm, text, K, d, spans: dropin(lm, text, K, d, ours=False)}  # fmt: skip
CASE = runner.Case("official", contenders=tuple(TASKS), sizes=((4096, 0), (4096, 3), (4096, 10)), setup=setup)


class Jobs:
    """Each job through the runner (cached: a crashed bench resumes), and what this project lost."""

    def __init__(self, K: int, d: int, cap_gb: float, timeout: float, tokens: int):
        self.K, self.d, self.cap_gb, self.timeout, self.tokens = K, d, cap_gb, timeout, tokens
        self.hits, self.slower = 0, []

    def run(self, task: str, tokens: int, doc: int | None, spans: list | None = None) -> dict:
        options = {"K": self.K, "d": self.d, **({"spans": spans} if spans is not None else {})}
        (row,) = runner.run(CASE, contenders=[task], sizes=[[tokens, doc]], options=options,
                            cap_gb=self.cap_gb, timeout=self.timeout, cache=CACHE)  # fmt: skip
        self.hits += bool(row.get("cached"))
        return row

    def lost(self, what: str, ours: float, theirs: float) -> None:
        if ours > theirs:
            self.slower.append(f"{what} ({ours / theirs:.2f})")


def seconds(row: dict) -> float:
    return row["work"]["seconds"]


def peak(row: dict) -> float:
    """The process's peak resident memory in GB, models included."""
    return row["process"]["peak_bytes"] / 1e9


def fmt(x, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def rel_diff(ours: dict, theirs: dict) -> float:
    """The larger relative difference of PPL and LongPPL."""
    longppl = (ours["longppl"] or 1) / (theirs["longppl"] or 1)
    return max(abs(ours["ppl"] / theirs["ppl"] - 1), abs(longppl - 1))


def ratios(pairs: list[tuple[dict, dict]]) -> tuple[float | None, float | None]:
    """Ours against a baseline over documents: the ratio of the sums of their times and of the maxima
    of their peaks."""
    times = [sum(seconds(p[i]) for p in pairs) for i in (0, 1)]
    return ratio(*times), ratio(*[max((peak(p[i]) for p in pairs), default=0.0) for i in (0, 1)])


def failed(*rows: dict) -> str | None:
    """Why a comparison has no numbers: each failed contender's reason."""
    why = [f"{r['contender']}: {r['failed']}" for r in rows if "failed" in r]
    return "; ".join(why) or None


def token_diffs(ours: dict, official_spans: list) -> list[dict]:
    """Evaluator tokens whose key status differs between the two span sets, with our LSD and LCL."""
    import numpy as np

    from pipeline.definition import merge_spans
    from pipeline.text.alignment import hard_key_mask

    offsets = np.array(ours["offsets"], dtype=np.int64).reshape(-1, 2)
    a, b, _ = merge_spans(np.array([s for s, _ in official_spans]), np.array([e for _, e in official_spans]))
    theirs = hard_key_mask(offsets, a, b)
    starts, ends = (np.array([s[i] for s in ours["spans"]], dtype=np.int64) for i in (0, 1))
    mine = hard_key_mask(offsets, starts, ends)
    rows = []
    for i in np.flatnonzero(theirs != mine):
        lsd, lcl = ours["lsd"][i], ours["long"][i]
        margin = min(abs((lsd or 0) - 2.0), abs(lcl + 2.0))
        rows.append({"token": int(i), "ours": bool(mine[i]), "lsd": lsd, "lcl": lcl, "margin": margin})
    return rows


def compare_4k(jobs: Jobs, docs: list[int]) -> tuple[list[str], dict]:
    """Stage 1 and stage 2 on each document cut to ``jobs.tokens``: the tables and the summary's ratios."""
    stage1 = [f"## Same documents, {jobs.tokens} tokens: stage 1 and stage 2", "",
              f"GovReport sample documents {docs}, each truncated to {jobs.tokens} Gemma tokens; K={jobs.K}, "
              f"d={jobs.d}, alpha=2, beta=-2, float32, CPU.", "",
              "The official code runs with transformers' default attention (`sdpa`), as its users get it; this project "
              "with its block-sparse `blocked_sdpa` (pipeline/models/attention.py, exact). The column *official + our "
              "attention* gives the official code our attention too, which separates the two gains: the rest is this "
              "project's output head and window scheme.", "",
              "| document | key spans ours / official | differing tokens | stage 1 time ours / official (s) | ratio "
              "| official + our attention (s) | ours / that | stage 1 peak ours / official (GB) | ratio |",
              "|---|---|---|---|---:|---:|---:|---|---:|"]  # fmt: skip
    stage2 = ["", "Stage 2 (SmolLM2-135M, the official package's conventions: no BOS), on the official key spans:", "",
              "| document | PPL ours / official | LongPPL ours / official | max rel. diff | time ours / plain / official (s) "
              "| ours / plain | ours / official |", "|---|---|---|---:|---|---:|---:|"]  # fmt: skip
    t, pairs, diffs = {k: 0.0 for k in ("ours", "blocked", *STAGE2)}, [], []
    for doc in docs:
        ours, off, blocked = (jobs.run(task, jobs.tokens, doc) for task in STAGE1)
        if why := failed(ours, off):
            stage1.append(f"| {doc} | {why} | | | | | | | |")
            continue
        jobs.lost(f"stage 1 time on document {doc}", seconds(ours), seconds(off))
        diffs += (found := token_diffs(ours, off["spans"]))
        t_blocked = None if "failed" in blocked else seconds(blocked)
        pairs.append((ours, off))
        t["ours"], t["blocked"] = t["ours"] + seconds(ours), t["blocked"] + (t_blocked or math.nan)
        stage1.append(
            f"| {doc} | {len(ours['spans'])} / {len(off['spans'])} | {len(found)} | {seconds(ours):.1f} / "
            f"{seconds(off):.1f} | {seconds(ours) / seconds(off):.2f} | {fmt(t_blocked, 1)} | "
            f"{fmt(ratio(seconds(ours), t_blocked))} | {peak(ours):.2f} / {peak(off):.2f} | {peak(ours) / peak(off):.2f} |"
        )
        stage2.append(stage2_row(jobs, doc, [list(s) for s in off["spans"]], t))
    summary = dict(zip(("stage1_time_ratio", "stage1_memory_ratio"), ratios(pairs), strict=True)) | {
        "stage1_vs_official_same_attention": ratio(t["ours"], t["blocked"]),
        "stage2_vs_plain": ratio(t["stage2-ours"], t["stage2-plain"]),
        "stage2_vs_official": ratio(t["stage2-ours"], t["stage2-official"]),
        "differing_tokens": diffs,
    }
    return stage1 + diff_table(diffs) + stage2, summary


def stage2_row(jobs: Jobs, doc: int, spans: list, totals: dict) -> str:
    """Stage 2 on one document against the official key spans: ours, plain PPL, official."""
    ours, plain, off = (jobs.run(task, jobs.tokens, doc, spans) for task in STAGE2)
    if why := failed(ours, plain, off):
        return f"| {doc} | {why} | | | | | |"
    rel = rel_diff(ours, off)
    for task, row in zip(STAGE2, (ours, plain, off), strict=True):
        totals[task] += seconds(row)
    for name, base in (("official", off), ("plain", plain)):
        jobs.lost(f"stage 2 vs {name} on document {doc}", seconds(ours), seconds(base))
    return (
        f"| {doc} | {ours['ppl']:.5f} / {off['ppl']:.5f} | {fmt(ours['longppl'], 5)} / {fmt(off['longppl'], 5)} "
        f"| {rel:.1e} | {seconds(ours):.1f} / {seconds(plain):.1f} / {seconds(off):.1f} "
        f"| {seconds(ours) / seconds(plain):.3f} | {seconds(ours) / seconds(off):.2f} |"
    )


def diff_table(diffs: list[dict]) -> list[str]:
    if not diffs:
        return []
    return ["", "Tokens whose key status differs (our LSD and LCL; margin = distance to the nearer threshold):", "",
            "| token | key in ours | LSD | LCL | margin |", "|---:|---|---:|---:|---:|",
            *(f"| {x['token']} | {x['ours']} | {x['lsd']} | {x['lcl']} | {x['margin']:.1e} |" for x in diffs)]  # fmt: skip


def compare_dropin(jobs: Jobs, docs: list[int]) -> tuple[list[str], dict]:
    """The drop-in's table and its summary (sums of times, maxima of peaks, the largest difference)."""
    lines = ["## Drop-in `compute_longppl`: `pipeline.api.dropin` against the official package", "",
             f"GovReport sample documents {docs}, {jobs.tokens} Gemma tokens each; online mode (Gemma 3 270M finds the key "
             f"tokens, SmolLM2-135M is scored), trunc_len={jobs.K}, sliding_window={jobs.d}, alpha=2, beta=-2, "
             "float32, CPU; both given the same model objects (attention `sdpa`). Peak: the whole process, models "
             "included.", "",
             "| document | LongPPL ours / official | PPL ours / official | key tokens ours / official | max rel. diff "
             "| time ours / official (s) | ratio | peak ours / official (GB) | ratio |",
             "|---|---|---|---|---:|---|---:|---|---:|"]  # fmt: skip
    pairs, worst = [], 0.0
    for doc in docs:
        ours, off = (jobs.run(task, jobs.tokens, doc) for task in DROPIN)
        if why := failed(ours, off):
            lines.append(f"| {doc} | {why} |")
            continue
        rel, worst = rel_diff(ours, off), max(worst, rel_diff(ours, off))
        longppl = "n/a" if ours["longppl"] is None else f"{ours['longppl']:.5f} / {fmt(off['longppl'], 5)}"
        lines.append(
            f"| {doc} | {longppl} | {ours['ppl']:.5f} / {off['ppl']:.5f} | {ours['n_key']} / {off['n_key']} "
            f"| {rel:.1e} | {seconds(ours):.1f} / {seconds(off):.1f} | {seconds(ours) / seconds(off):.2f} "
            f"| {peak(ours):.2f} / {peak(off):.2f} | {peak(ours) / peak(off):.2f} |"
        )
        jobs.lost(f"drop-in time on document {doc}", seconds(ours), seconds(off))
        pairs.append((ours, off))
    summary = dict(zip(("dropin_time_ratio", "dropin_memory_ratio"), ratios(pairs), strict=True))
    summary["dropin_max_rel_diff"] = worst
    return lines, summary


def sweep(jobs: Jobs, lengths: list[int]) -> list[str]:
    """Stage 1 on the documents concatenated, cut to each length: ours against the official."""
    lines = ["## Scaling: stage 1 on one document of growing length", "",
             f"The shipped documents concatenated and cut to each length; K={jobs.K}, d={jobs.d}; each run in its "
             f"own process, killed past {jobs.cap_gb:g} GB.", "",
             f"A document of K={jobs.K} tokens or fewer has no token with a short context: both implementations run "
             "only the long pass, and the difference is the output head (this project's in blocks, the official "
             "one full-logits product).", "",
             "| tokens | ours: s | ours: peak GB | official: s | official: peak GB | time ratio | memory ratio |",
             "|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for n in lengths:
        ours, off = (jobs.run(task, n, None) for task in STAGE1[:2])
        ratios = "n/a | n/a"
        if not failed(ours, off):
            ratios = f"{seconds(ours) / seconds(off):.2f} | {peak(ours) / peak(off):.2f}"
            jobs.lost(f"stage 1 time at {n} tokens", seconds(ours), seconds(off))
        cells = [(r["failed"], f"{peak(r):.2f}+") if "failed" in r else (f"{seconds(r):.1f}", f"{peak(r):.2f}")
                 for r in (ours, off)]  # fmt: skip
        lines.append(f"| {n} | {' | '.join(cells[0])} | {' | '.join(cells[1])} | {ratios} |")
    return lines


def report_head(jobs: Jobs, summary: dict, quick: bool, minutes: float) -> list[str]:
    keys = (("stage 1 time", "stage1_time_ratio"), ("stage 1 memory", "stage1_memory_ratio"),
            ("stage 2 vs official", "stage2_vs_official"), ("drop-in time", "dropin_time_ratio"),
            ("drop-in memory", "dropin_memory_ratio"))  # fmt: skip
    slower = [name for name, key in keys if (summary.get(key) or 0) > 1.0] + jobs.slower
    cached = (f" {jobs.hits} of its jobs were measured by an earlier run of the same command and read from "
              f"{CACHE} (`--fresh` measures everything again)." if jobs.hits else "")  # fmt: skip
    return [
        "# Benchmarks: this pipeline vs the official `longppl` 0.3.0 and plain perplexity", "",
        f"Regenerate: `make bench{'-quick' if quick else ''}` ({minutes:.0f} minutes for this run)." + cached
        + " Evaluator Gemma 3 270M, evaluated model SmolLM2-135M-Instruct, both embedded, float32.", "",
        f"Machine: {runner.stamp()}, longppl 0.3.0.", "",
        "## Summary (ratios: this project / baseline, measured in this run)", "",
        f"- Stage 1 wall time / official `find_key_token` at {jobs.tokens} tokens: {fmt(summary['stage1_time_ratio'])}",
        f"- Stage 1 wall time / official given this project's attention: {fmt(summary['stage1_vs_official_same_attention'])}",
        f"- Stage 1 peak memory / official at {jobs.tokens} tokens: {fmt(summary['stage1_memory_ratio'])}",
        f"- Stage 2 / plain-PPL pass (same forward path): {fmt(summary['stage2_vs_plain'], 3)}",
        f"- Stage 2 / official `compute_longppl` (offline mode): {fmt(summary['stage2_vs_official'])}",
        f"- Drop-in `compute_longppl` / official, online mode: wall time {fmt(summary['dropin_time_ratio'])}, "
        f"peak memory {fmt(summary['dropin_memory_ratio'])}",
        f"- Evaluator tokens whose key status differs: {len(summary['differing_tokens'])}",
        "- Slower than the baseline: " + (", ".join(slower) if slower else "nowhere in this run"), "",
    ]  # fmt: skip


def main() -> None:
    if runner.child(CASE):
        return
    parser = shared.arguments(__doc__)
    parser.add_argument("--quick", action="store_true", help="no scaling, one document")
    parser.add_argument(
        "--tokens", type=shared.whole(2), default=4096, help="the documents' length (a dry run: 256)"
    )
    parser.add_argument("--K", type=shared.whole(1), default=1024)
    parser.add_argument("--d", type=shared.whole(1), default=1024)
    parser.add_argument("--cap-gb", type=shared.above(0), default=20.0)
    parser.add_argument("--timeout", type=shared.above(0), default=1800.0)
    parser.add_argument(
        "--output", type=shared.output_file, help="a page of its own (default: docs/reports/benchmarks.md)"
    )
    parser.add_argument("--fresh", action="store_true", help="ignore results cached by an earlier run")
    parser.add_argument("--only", choices=["dropin"], help="one comparison only, in its own section")
    args = parser.parse_args()
    CACHE.unlink(missing_ok=True) if args.fresh else None
    started, jobs = time.time(), Jobs(args.K, args.d, args.cap_gb, args.timeout, args.tokens)
    docs = [0] if args.quick else [0, 3, 10]
    body, summary = ([], {}) if args.only else compare_4k(jobs, docs)
    dropin_lines, found = compare_dropin(jobs, docs)
    sweep_lines = (
        [] if args.quick or args.only else ["", *sweep(jobs, [1024, 2048, 4096, 8192, 16384, 32768])]
    )
    minutes = (time.time() - started) / 60
    if args.only == "dropin":
        lines = [
            "# Benchmark: the drop-in `compute_longppl` against the official `longppl` 0.3.0", "",
            f'Regenerate: `make bench-official ARGS="--only dropin"` ({minutes:.0f} minutes for this run; '
            f"`make bench` includes it). Machine: {runner.stamp()}.", "",
            f"Ratios (this project / official): wall time {fmt(found['dropin_time_ratio'])}, peak memory "
            f"{fmt(found['dropin_memory_ratio'])}; largest relative difference of PPL or LongPPL "
            f"{found['dropin_max_rel_diff']:.1e}.", "",
        ]  # fmt: skip
    else:
        lines = [*report_head(jobs, summary | found, args.quick, minutes), *body, ""]
    text = "\n".join([*lines, *dropin_lines, *sweep_lines, ""])
    publish(text, "benchmarks.md", args.only or "official", args.output)
    print(text, end="")


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
