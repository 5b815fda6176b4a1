"""The lm-eval route (`make lm-eval`) against `make score`, and lm-eval's `hf` model against `longppl`.

``--part time``: on one artifact (default: the default artifact), `make score`'s command and
`make lm-eval`'s command, each in a fresh process, one after the other (``--repeats`` times each):
wall and CPU time of each, their ratio, and the corpus values of both (relative differences;
lm-eval's results file checked against lm-eval's results schema).

``--part memory``: one document of about ``--tokens`` tokens (the first GovReport text, cut), its
``loglikelihood_rolling`` by lm-eval's ``hf`` model (whole-sequence logits) and by ``longppl`` (the
score engine), each in a fresh process: peak resident memory above the loaded model, time, and the
two log-likelihoods.

    make bench-lmeval
    make bench-lmeval ARGS="--part memory --tokens 4096"
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from bench import runner, shared
from pipeline.metric_registry import metrics
from pipeline.results.score import read_lines

MODEL = "smollm2-135m"


def command(route: str, size: None, artifact: str = "", work: str = "") -> list[str] | None:
    """The command of a route (None: a loglikelihood_rolling contender, run by ``setup``)."""
    if route == "make score":
        return [sys.executable, "-m", "pipeline.commands.score", f"artifact={artifact}",
                f"results={work}/scores.jsonl", "progress=false"]  # fmt: skip
    if route == "make lm-eval":
        return [sys.executable, "-m", "pipeline.commands.lm_eval", "--model_args", f"pretrained={MODEL}",
                "--artifact", artifact, "--tasks", f"longppl_{Path(artifact).name}", "--output_path",
                f"{work}/lm-eval"]  # fmt: skip
    return None


def time_part(artifact: Path, repeats: int) -> None:
    from pipeline.lmeval.results_schema import schema_problems

    task, work = f"longppl_{artifact.name}", Path(tempfile.mkdtemp(prefix="bench-lmeval-"))
    options = {"artifact": str(artifact), "work": str(work)}
    rows = runner.run(CASE, contenders=ROUTES, options=options, repeats=repeats, strict=True)
    line = read_lines(work / "scores.jsonl")[-1][1]
    path = sorted((work / "lm-eval").rglob("results_*.json"))[-1]
    results = json.loads(path.read_text())
    print(f"| route (model {MODEL}, artifact {artifact.name}) | wall s, each run | CPU s, each run |")
    print("|---|---|---|")
    for r in rows:
        runs = r["work"]["runs"]
        print(
            f"| {r['contender']} | {', '.join(f'{w:.1f}' for w, _ in runs)} | {', '.join(f'{c:.1f}' for _, c in runs)} |"
        )
    score, lmeval = (r["work"] for r in rows)
    for key, what in (("seconds", "wall"), ("cpu_s", "CPU")):
        print(f"\nlm-eval route / make score, {what} time (medians): {lmeval[key] / score[key]:.3f}")
    print(f"\ntorch threads: {os.environ.get('OMP_NUM_THREADS', 'default')} (OMP_NUM_THREADS)\n")
    print("| metric | make score | lm-eval results file | relative difference |")
    print("|---|---:|---:|---:|")
    for m in metrics():
        a, b = line["corpus"][m.name], results["results"][task][f"{m.lmeval_name},none"]
        print(f"| {m.name} | {a!r} | {b!r} | {abs(a - b) / abs(a):.1e} |")
    meta = results["configs"][task]["metadata"]
    print(f"\nresults file {path.name}\nfingerprint in it: {meta['longppl_fingerprint']}")
    print(f"schema problems: {schema_problems(results) or 'none'}")


def document(tokens: int) -> str:
    """The first GovReport text, cut after about ``tokens`` of SmolLM2's tokens."""
    from pipeline.models.loading import load_model
    from pipeline.text.tokenization import encode_with_offsets

    text = json.loads((shared.ROOT / "data/govreport-sample.jsonl").open(encoding="utf-8").readline())["text"]
    tokenizer = load_model(MODEL, dtype="float32", device="cpu").tokenizer
    offsets = encode_with_offsets(tokenizer, text).offsets
    return text[: int(offsets[min(tokens, len(offsets)) - 1, 1])]


def setup(kind: str, tokens: int) -> runner.Work:
    """One model's loglikelihood_rolling of the document (lm-eval's ``hf`` or ``longppl``), loaded."""
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
    n = len(lm.tokenizer(text, add_special_tokens=False)["input_ids"])

    def work() -> dict:
        (value,) = lm.loglikelihood_rolling([request], disable_tqdm=True)
        return {"tokens": n, "loglikelihood": float(value)}

    return work


ROUTES, MODELS = ("make score", "make lm-eval"), ("hf", "longppl")
CASE = runner.Case("lmeval", contenders=(*ROUTES, *MODELS), command=command, setup=setup)


def memory_part(tokens: int) -> None:
    rows = runner.run(CASE, contenders=MODELS, sizes=[tokens], strict=True)
    print("| model (lm-eval --model) | tokens | log-likelihood | peak memory above the model | seconds |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        w = r["work"]
        print(
            f"| {r['contender']} | {r['tokens']} | {r['loglikelihood']:.6f} | {w['above_start_bytes'] / 2**30:.2f} GiB | {w['seconds']:.1f} |"
        )
    a, b = rows[0]["loglikelihood"], rows[1]["loglikelihood"]
    print(f"\nrelative difference of the log-likelihoods: {abs(a - b) / abs(a):.1e}")


def main() -> None:
    if runner.child(CASE):
        return
    parser = shared.arguments(__doc__)
    parser.add_argument("--part", choices=("time", "memory", "all"), default="all")
    parser.add_argument("--artifact", default=str(shared.default_artifact()))
    parser.add_argument("--repeats", type=shared.whole(1), default=1)
    parser.add_argument("--tokens", type=shared.whole(2), default=4096)
    args = parser.parse_args()
    if args.part in ("memory", "all"):
        memory_part(args.tokens)
        print()
    if args.part in ("time", "all"):
        time_part(Path(args.artifact), args.repeats)


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
