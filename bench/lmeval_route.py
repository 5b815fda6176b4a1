"""The lm-eval route (`make lm-eval`) against `make score`, and lm-eval's `hf` model against `longppl`.

``--part time`` (point 1 and 5 of the lm-eval work): on one artifact (default: the default artifact),
`make score`'s command and `make lm-eval`'s command, each in a fresh process, one after the other
(``--repeats`` times, alternating): wall time of each, their ratio, and the corpus values of both
(relative differences; lm-eval's results file checked against lm-eval's results schema).

``--part memory``: one document of about ``--tokens`` tokens (the first GovReport text, cut), its
``loglikelihood_rolling`` by lm-eval's ``hf`` model (whole-sequence logits) and by ``longppl`` (the
score engine), each in a fresh process: peak resident memory above the loaded model, time, and the
two log-likelihoods.

    make bench-lmeval
    .venv/bin/python -m bench.lmeval_route --part memory --tokens 4096
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import ROOT, PeakMemory, arguments, child, default_artifact, run, timed_command
from pipeline.results.score import read_lines

MODEL = "smollm2-135m"
METRICS = {"ppl": "ppl", "longppl": "longppl", "longppl_soft": "longppl_soft", "bpb": "bits_per_byte",
           "key_bpb": "key_bits_per_byte"}  # fmt: skip


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, the process and its children) of a command."""
    return timed_command(cmd)[:2]


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def time_part(artifact: Path, repeats: int) -> None:
    from pipeline.lmeval.results_schema import schema_problems

    task = f"longppl_{artifact.name}"
    work = Path(tempfile.mkdtemp(prefix="bench-lmeval-"))
    score_s, lmeval_s = [], []
    for i in range(repeats):
        score_s.append(timed([sys.executable, "-m", "pipeline.commands.score", f"artifact={artifact}",
                              f"results={work / 'scores.jsonl'}", "progress=false"]))  # fmt: skip
        lmeval_s.append(timed([sys.executable, "-m", "pipeline.commands.lm_eval", "--model_args", f"pretrained={MODEL}",
                               "--artifact", str(artifact), "--tasks", task,
                               "--output_path", str(work / f"lm-eval-{i}")]))  # fmt: skip
    line = read_lines(work / "scores.jsonl")[-1][1]
    (path,) = (work / f"lm-eval-{repeats - 1}").rglob("results_*.json")
    results = json.loads(path.read_text())
    print(f"| route (model {MODEL}, artifact {artifact.name}) | wall s, each run | CPU s, each run |")
    print("|---|---|---|")
    for name, runs in (("make score", score_s), ("make lm-eval", lmeval_s)):
        print(
            f"| {name} | {', '.join(f'{w:.1f}' for w, _ in runs)} | {', '.join(f'{c:.1f}' for _, c in runs)} |"
        )
    for i, what in ((0, "wall"), (1, "CPU")):
        ratio = median([r[i] for r in lmeval_s]) / median([r[i] for r in score_s])
        print(f"\nlm-eval route / make score, {what} time (medians): {ratio:.3f}")
    print(f"\ntorch threads: {os.environ.get('OMP_NUM_THREADS', 'default')} (OMP_NUM_THREADS)\n")
    print("| metric | make score | lm-eval results file | relative difference |")
    print("|---|---:|---:|---:|")
    for ours, theirs in METRICS.items():
        a, b = line["corpus"][ours], results["results"][task][f"{theirs},none"]
        print(f"| {ours} | {a!r} | {b!r} | {abs(a - b) / abs(a):.1e} |")
    meta = results["configs"][task]["metadata"]
    print(f"\nresults file {path}\nfingerprint in it: {meta['longppl_fingerprint']}")
    print(f"schema problems: {schema_problems(results) or 'none'}")


def document(tokens: int) -> str:
    """The first GovReport text, cut after about ``tokens`` of SmolLM2's tokens."""
    from pipeline.models.loading import load_model
    from pipeline.text.tokenization import encode_with_offsets

    text = json.loads((ROOT / "data/govreport-sample.jsonl").open(encoding="utf-8").readline())["text"]
    tokenizer = load_model(MODEL, dtype="float32", device="cpu").tokenizer
    offsets = encode_with_offsets(tokenizer, text).offsets
    return text[: int(offsets[min(tokens, len(offsets)) - 1, 1])]


def measure(kind: str, tokens: int) -> dict:
    """One model's loglikelihood_rolling of the document, in its own process."""
    from lm_eval.api.instance import Instance

    from pipeline.models.gguf import convert_gguf
    from pipeline.models.sources import EMBEDDED_MODELS

    text = document(tokens)
    if kind == "hf":
        from lm_eval.models.huggingface import HFLM

        checkpoint, _ = convert_gguf(EMBEDDED_MODELS[MODEL].gguf_path())
        lm = HFLM(
            pretrained=str(checkpoint), dtype="float32", device="cpu", batch_size=1, add_bos_token=False
        )
    else:
        from pipeline.lmeval import LongPPLLM

        lm = LongPPLLM(MODEL, dtype="float32", device="cpu")
    request = Instance("loglikelihood_rolling", {}, (text,), 0, ("bench", 0, 1))
    started = time.perf_counter()
    with PeakMemory() as peak:
        (value,) = lm.loglikelihood_rolling([request], disable_tqdm=True)
    n = len(lm.tokenizer(text, add_special_tokens=False)["input_ids"])
    return {"kind": kind, "tokens": n, "loglikelihood": float(value),
            "above_model_gib": peak.above_start_gb, "seconds": time.perf_counter() - started}  # fmt: skip


def memory_part(tokens: int) -> None:
    rows = run("bench.lmeval_route", [{"kind": kind, "tokens": tokens} for kind in ("hf", "longppl")])
    print("| model (lm-eval --model) | tokens | log-likelihood | peak memory above the model | seconds |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['kind']} | {r['tokens']} | {r['loglikelihood']:.6f} | {r['above_model_gib']:.2f} GiB | {r['seconds']:.1f} |"
        )
    a, b = rows[0]["loglikelihood"], rows[1]["loglikelihood"]
    print(f"\nrelative difference of the log-likelihoods: {abs(a - b) / abs(a):.1e}")


def main() -> None:
    if child(measure):
        return
    parser = arguments(__doc__)
    parser.add_argument("--part", choices=("time", "memory", "all"), default="all")
    parser.add_argument("--artifact", default=str(default_artifact()))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=4096)
    args = parser.parse_args()
    if args.part in ("memory", "all"):
        memory_part(args.tokens)
        print()
    if args.part in ("time", "all"):
        time_part(Path(args.artifact), args.repeats)


if __name__ == "__main__":
    main()
