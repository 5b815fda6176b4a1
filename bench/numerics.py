"""`make bench-numerics`: how far key tokens and scores computed on a GPU are from the CPU's, on real
weights. The embedded SmolLM2-135M-Instruct is the evaluator on the default corpus (the 13 shipped
GovReport documents, K=1024, d=1024, no BOS before the short windows, as the official code), run as

- CPU float32: the reference (or ``--reference DIR``, an artifact computed so elsewhere);
- float32 with TF32 off (the pipeline's default), with TF32 on, with TF32 on and attention on sdpa's
  math backend in query blocks (as before 88746e2), bfloat16 with the float32 head
  (``head_dtype=float32``), float16 with the float32 head, and bfloat16 logits (``head_dtype=model``)
  on ``--device``;
- the official ``find_key_token`` in bfloat16 on the same texts;

and compared with the reference: the Jaccard index of key characters, and quantiles of the per-token
|LSD| and |LCL| differences. Stage 2 (SmolLM2 scored against the reference artifact) runs on the CPU in
float32 and on the device in float32, bfloat16 and bfloat16 with the float32 head: PPL, LongPPL and
LongPPL-soft, and their differences from the CPU's. Each run is a contender of this case, in its own
process (``bench.gpu_child``, measured by ``bench.runner``); what they compute does not depend on their
timing, so the device's runs go at once, after the first (which converts the GGUF once).

    python -m bench.numerics --json numerics.json
"""

from __future__ import annotations

import argparse
import json
from functools import partial
from pathlib import Path

import numpy as np

from bench import runner, shared
from bench.gpu_child import command_line
from pipeline.errors import ArgumentParser

WORK = Path("artifacts/bench/numerics")
EVALUATOR = ["evaluator=smollm2-135m", "short_window_bos=false", "progress=false"]
OFFICIAL = "official find_key_token"


def stage1_runs(device: str) -> dict[str, list[str]]:
    """Name -> ``bench.gpu_child stage1`` arguments of each run on the device."""
    f32 = [f"device={device}", "dtype=float32"]
    return {
        f"{device} float32": f32,
        f"{device} float32, TF32": [*f32, "--tf32"],
        f"{device} float32, TF32, math attention": [*f32, "--tf32", "--sdpa-math"],
        f"{device} bfloat16, float32 head": [f"device={device}", "dtype=bfloat16", "head_dtype=float32"],
        f"{device} float16, float32 head": [f"device={device}", "dtype=float16", "head_dtype=float32"],
        f"{device} bfloat16 logits": [f"device={device}", "dtype=bfloat16", "head_dtype=model"],
    }


def stage2_runs(device: str) -> dict[str, list[str]]:
    return {
        f"{device} float32": [f"device={device}", "dtype=float32"],
        f"{device} bfloat16": [f"device={device}", "dtype=bfloat16", "head_dtype=model"],
        f"{device} bfloat16, float32 head": [f"device={device}", "dtype=bfloat16", "head_dtype=float32"],
    }


def command(
    contender: str, size: None, work: str, device: str, overrides: list, reference: str = ""
) -> list | None:
    """A run's command (``stage 1: <name>``, ``stage 2: <name>``), or None: the official code, in a child."""
    kind, _, name = contender.partition(": ")
    events = Path(work) / f"{shared.slug(contender)}.events.jsonl"
    if kind == "stage 1":
        runs = {"cpu float32": ["device=cpu", "dtype=float32"], **stage1_runs(device)}
        out = [f"output_dir={Path(work) / 'keytokens'}", f"name={shared.slug(name)}"]
        return command_line("stage1", events, [*EVALUATOR, *out, *overrides, *runs[name]])
    if kind == "stage 2":
        runs = {"cpu float32": ["device=cpu", "dtype=float32"], **stage2_runs(device)}
        results = Path(work) / f"scores-{shared.slug(name)}.jsonl"
        args = ["model=smollm2-135m", f"artifact={reference}", f"results={results}", "progress=false"]
        return command_line("stage2", events, [*args, *runs[name]])
    return None


def setup(
    contender: str, size: None, work: str, device: str, overrides: list, reference: str = ""
) -> runner.Work:
    """The official find_key_token in bfloat16 with SmolLM2 (its converted checkpoint) on the reference
    artifact's texts, with its K and d: the key spans of each document."""
    import pyarrow.parquet as pq
    import torch
    from longppl.longppl import find_key_token
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipeline.models.gguf import convert_gguf
    from pipeline.models.sources import EMBEDDED_MODELS

    checkpoint, _ = convert_gguf(EMBEDDED_MODELS["smollm2-135m"].gguf_path())
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.bfloat16, device_map=device).eval()
    docs = pq.read_table(Path(reference) / "documents.parquet", columns=["doc_id", "text"]).to_pylist()
    settings = json.loads((Path(reference) / "manifest.json").read_text())["settings"]

    def work() -> dict:
        spans = [[doc["doc_id"], int(s), int(e)] for doc in docs
                 for s, e in find_key_token(doc["text"], model, tokenizer, settings["K"], settings["d"]).tolist()]  # fmt: skip
        return {"spans": spans}

    return work


STAGE1 = [f"stage 1: {n}" for n in ["cpu float32", *stage1_runs("cuda")]]
STAGE2 = [f"stage 2: {n}" for n in ["cpu float32", *stage2_runs("cuda")]]
CASE = runner.Case("numerics", contenders=(*STAGE1, OFFICIAL, *STAGE2), command=command, setup=setup)


def key_characters(spans) -> set[tuple[str, int]]:
    return {(d, c) for d, s, e in spans for c in range(s, e)}


def artifact_keys(artifact: Path) -> tuple[set, int, int]:
    """Key characters, spans and key tokens of an artifact."""
    import pyarrow.parquet as pq

    spans = pq.read_table(artifact / "spans.parquet").to_pydict()
    tokens = pq.read_table(artifact / "tokens.parquet", columns=["is_key"]).column("is_key").to_numpy()
    rows = zip(spans["doc_id"], spans["char_start"], spans["char_end"], strict=True)
    return key_characters(rows), len(spans["doc_id"]), int(tokens.sum())


def value_differences(artifact: Path, reference: Path) -> dict[str, list[float]]:
    """Quantiles (median, 99th percentile, max) of |LSD| and |LCL| differences, token by token."""
    import pyarrow.parquet as pq

    cols = ["doc_id", "token_index", "long_logprob", "lsd"]
    a, b = (pq.read_table(p / "tokens.parquet", columns=cols).to_pandas() for p in (artifact, reference))
    if len(a) != len(b) or not (a["token_index"].to_numpy() == b["token_index"].to_numpy()).all():
        raise SystemExit(f"{artifact} and {reference} hold other tokens: not comparable value by value")
    out = {}
    for col, label in (("lsd", "lsd"), ("long_logprob", "lcl")):
        d = np.abs(a[col].to_numpy(np.float64) - b[col].to_numpy(np.float64))
        d = d[~np.isnan(d)]
        out[label] = [float(np.quantile(d, q)) for q in (0.5, 0.99, 1.0)] if d.size else [float("nan")] * 3
    return out


def measure(args: argparse.Namespace) -> dict:
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    options = {"work": str(work), "device": args.device, "overrides": args.overrides}
    run = partial(runner.run, CASE, options=options, logs=work)
    if args.reference:
        reference, ref_wall = args.reference, None
    else:
        (ref,) = run(contenders=["stage 1: cpu float32"], strict=True)
        reference, ref_wall = (
            work / "keytokens" / shared.slug("cpu float32"),
            round(ref["work"]["seconds"], 1),
        )
    options["reference"] = str(reference)
    ref_keys, ref_spans, ref_tokens = artifact_keys(reference)
    rows = [{"name": "cpu float32 (reference)", "key_tokens": ref_tokens, "spans": ref_spans,
             "key_chars": len(ref_keys), "jaccard": 1.0, "wall_s": ref_wall}]  # fmt: skip
    names = list(stage1_runs(args.device))
    runs = run(contenders=[f"stage 1: {names[0]}"])  # converts the GGUF once, alone
    runs += run(contenders=[f"stage 1: {n}" for n in names[1:]], parallel=len(names) - 1)
    for name, done in zip(names, runs, strict=True):
        wall = round(done["process"]["seconds"], 1)
        if "failed" in done:  # a failed run is a result (float16 may overflow): the others go on
            rows.append({"name": name, "error": done["failed"], "wall_s": wall})
            continue
        artifact = work / "keytokens" / shared.slug(name)
        keys, spans, tokens = artifact_keys(artifact)
        rows.append({"name": name, "key_tokens": tokens, "spans": spans, "key_chars": len(keys),
                     "jaccard": jaccard(keys, ref_keys), "abs_diff": value_differences(artifact, reference),
                     "wall_s": wall})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    if args.json:  # what is measured so far, should the run be cut short
        args.json.write_text(json.dumps({"bench": "gpu_numerics", "partial": True, "stage1": rows}, indent=1))
    (official,) = run(contenders=[OFFICIAL], strict=True)
    keys = key_characters(official["spans"])
    rows.append({"name": f"official find_key_token, {args.device} bfloat16", "spans": len(official["spans"]),
                 "key_chars": len(keys), "jaccard": jaccard(keys, ref_keys),
                 "wall_s": round(official["work"]["seconds"], 1)})  # fmt: skip
    return {"bench": "gpu_numerics", "machine": runner.machine(), "reference": shared.relative(reference),
            "stage1": rows, "stage2": scores(args, run, reference)}  # fmt: skip


def scores(args: argparse.Namespace, run, reference: Path) -> list[dict]:
    """Stage 2 (SmolLM2 scored against the reference artifact) on the CPU in float32, read from
    ``--reference-scores`` where given, and on the device: PPL, LongPPL, LongPPL-soft."""
    names = list(stage2_runs(args.device))
    if not args.reference_scores:
        names.insert(0, "cpu float32")
    rows = run(contenders=[f"stage 2: {n}" for n in names], parallel=4, strict=True)
    found = [
        json.loads((args.work / f"scores-{shared.slug(n)}.jsonl").read_text().splitlines()[-1])["corpus"]
        for n in names
    ]
    scored = [{"name": n, **{k: c[k] for k in ("ppl", "longppl", "longppl_soft")}, "wall_s": round(r["process"]["seconds"], 3)}
              for n, c, r in zip(names, found, rows, strict=True)]  # fmt: skip
    if args.reference_scores:  # `make score` of SmolLM2 on the reference artifact, on the CPU in float32
        corpus = json.loads(args.reference_scores.read_text().splitlines()[-1])["corpus"]
        scored.insert(
            0, {"name": "cpu float32", **{k: corpus[k] for k in ("ppl", "longppl", "longppl_soft")}}
        )
    return scored


def jaccard(a: set, b: set) -> float:
    """|a & b| / |a | b|; 1 for two empty sets (the same key tokens: none)."""
    return round(len(a & b) / len(a | b), 4) if a or b else 1.0


def section(result: dict) -> list[str]:
    """The report's section (``bench.gpu_report``)."""
    m = result["machine"]
    lines = [
        "## Key tokens and scores on the GPU against the CPU (real weights)",
        "",
        f"{m.get('gpu', 'no GPU')}, torch {m['torch']}, transformers {m['transformers']}, commit {m.get('commit')}, "
        f"{m['date']}. The embedded SmolLM2-135M-Instruct as the evaluator on the 13 shipped documents "
        "(K=1024, d=1024, no BOS before the short windows); `make bench-numerics`.",
        "",
        "| stage 1 run | key tokens | spans | key characters | Jaccard vs CPU float32 | abs LSD diff: median / p99 / max | abs LCL diff: median / p99 / max |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for r in result["stage1"]:
        if "error" in r:
            lines.append(f"| {r['name']} | | | | failed: {r['error'][:160]} | | |")
            continue
        diff = r.get("abs_diff", {})
        cells = [" / ".join(f"{v:.2g}" for v in diff[k]) if k in diff else "" for k in ("lsd", "lcl")]
        lines.append(
            f"| {r['name']} | {r.get('key_tokens', '')} | {r['spans']} | {r['key_chars']} | {r['jaccard']:.3f} "
            f"| {cells[0]} | {cells[1]} |"
        )
    ref = result["stage2"][0]
    lines += [
        "",
        "Stage 2, SmolLM2 scored against the CPU's float32 artifact (difference from the CPU's):",
        "",
        "| run | PPL | LongPPL | LongPPL-soft |",
        "|---|---:|---:|---:|",
    ]
    for r in result["stage2"]:
        cells = [difference(r[k], ref[k]) for k in ("ppl", "longppl", "longppl_soft")]
        lines.append(f"| {r['name']} | {' | '.join(cells)} |")
    return [*lines, ""]


def difference(value: float | None, reference: float | None) -> str:
    if value is None or reference is None:
        return "n/a" if value is None else f"{value:.4f}"
    return f"{value:.4f} ({value - reference:+.1e})"


def main() -> None:
    if runner.child(CASE):
        return
    parser = ArgumentParser(prog=shared.program(), description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument(
        "--reference", type=shared.existing, help="a CPU float32 artifact made with the same settings"
    )
    parser.add_argument(
        "--reference-scores", type=Path, help="the results line of SmolLM2 scored on it there"
    )
    parser.add_argument("--json", type=shared.output_file, default=None)
    parser.add_argument("--overrides", nargs="*", default=[], help="more key=value for every stage-1 run")
    args = parser.parse_args()
    result = measure(args)
    path = args.json or WORK / "numerics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print("\n".join(section(result)))
    print(
        f"written: {path}; render docs/reports/benchmarks-gpu.md with `python -m bench.gpu_report {path} ...`"
    )


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
