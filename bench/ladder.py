"""The context ladder against one `make score`, one run each, side by side on the default artifact:
the wall time of each command as a user runs it (model load included), the ladder's model time per
rung, what the rungs reuse, and whether the ladder's full rung equals `make score`'s result to every
digit. The ladder's results line and picture go to ``--out`` (docs/reports/ladder by default), the report to
``--report``.

    make bench-ladder                                   # SmolLM2-135M (docs/reports/cost.md)
    make bench-ladder ARGS="--model gemma3-270m --report artifacts/ladder-cost-gemma.md"

``--key-only`` runs no model: it counts, from the tokenization alone, what a rung that computed only
the key tokens' log-probs could skip and still equal `make score` on them (whole window batches, as the
score stage forms them, and the first window when it holds no key token), against all of its windows.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench import runner, shared
from bench.report import publish
from pipeline.models.logprobs import _batches, short_windows


def command(name: str, size: None, model: str, artifact: str, results: dict, out: str) -> list[str]:
    """`make score` or `make ladder` with ``model`` on ``artifact`` as `make` runs it, its results line
    to ``results[name]`` (the ladder's picture to ``out``)."""
    known = (shared.ROOT / "conf" / "model" / f"{model}.yaml").is_file()
    group = [f"model={model}"] if known else ["model=local", f"model.spec={model}"]
    module = {"make score": "pipeline.commands.score", "make ladder": "pipeline.commands.ladder"}[name]
    plots = [f"plot_dir={out}"] if name == "make ladder" else []
    common = [f"artifact={artifact}", f"results={results[name]}", "progress=false"]
    return [sys.executable, "-m", module, *group, *common, *plots]


CASE = runner.Case("ladder", contenders=("make score", "make ladder"), command=command)


def passes(sequence: int, limit: int | None) -> tuple[int, int]:
    """Forward passes and tokens through the model's body of one document at one rung, as
    ``context_limited_logprobs`` runs them (0, 0 where the full pass serves the rung)."""
    if limit is None:
        return 1, sequence
    if sequence <= limit:
        return 0, 0
    windows = short_windows(sequence, limit - limit // 2, limit // 2)
    return 1 + len(windows), limit + sum(w.end - w.start + 1 for w in windows)  # each window: + BOS


def report(args: Any, score_s: float, ladder_s: float, scored: dict, ladder: dict, loads: tuple) -> str:
    """The Markdown report."""
    lengths = [d["n_tokens"] + 1 for d in scored["documents"]]  # with the BOS
    full_tokens = sum(lengths)
    same = ladder["rungs"][-1]["corpus"] == scored["corpus"] and ladder["rungs"][-1]["documents"] == scored[
        "documents"]  # fmt: skip
    rows = []
    for rung in ladder["rungs"]:
        counted = [passes(n, rung["context_limit"]) for n in lengths]
        rows.append(
            f"| {rung['context_limit'] or 'full'} | {rung['seconds']:.1f} | {rung['copied_documents']} | "
            f"{sum(c[0] for c in counted)} | {sum(c[1] for c in counted) / full_tokens:.2f} |"
        )
    n_docs, n_rungs = len(lengths), len(ladder["rungs"])
    model_s = sum(r["seconds"] for r in ladder["rungs"])
    return "\n".join([
        f"# The context ladder against one `make score` ({args.model})\n",
        f"`make bench-ladder{'' if args.model == 'smollm2-135m' else ' ARGS=...'}` (`bench/ladder.py`), one run "
        f"each, on {runner.stamp()}; load average {loads[0]:.1f} before and {loads[1]:.1f} after (a shared machine: "
        "wall times are contended).\n",
        f"Artifact `{ladder['artifact']['name']}` ({n_docs} documents, {full_tokens} tokens with the BOS).\n",
        "| command | wall time (s) | relative |", "| --- | ---: | ---: |",
        f"| `make score MODEL={args.model}` | {score_s:.0f} | 1.00 |",
        f"| `make ladder MODEL={args.model}` ({n_rungs} rungs) | {ladder_s:.0f} | {ladder_s / score_s:.2f} |\n",
        f"The ladder's full rung equals `make score`'s result to every digit (corpus and every document): "
        f"**{'yes' if same else 'NO'}**.\n",
        f"Per rung (model time {model_s:.0f} s in all): the documents the full pass serves (their sequence "
        "fits the rung: `context_limited_logprobs` would run that very pass), the windows run and "
        "the tokens through the model's body relative to one full pass:\n",
        "| rung | model time (s) | documents = full pass | windows (first included) | body tokens / full pass |",
        "| --- | ---: | ---: | ---: | ---: |", *rows, "",
        f"Reused across rungs, computed once per document instead of once per rung (as {n_rungs} `make score` "
        f"runs would): tokenization and the alignment of key spans, soft weights and the grid onto the tokens, "
        f"and the byte counts ({n_docs} instead of {n_docs * n_rungs} of each); one model load instead of "
        f"{n_rungs}; {sum(r['copied_documents'] for r in ladder['rungs'])} (document, rung) passes not run.\n",
    ])  # fmt: skip


def key_only(model: str, artifact_path: Path, rungs: list[int]) -> str:
    """What an exact key-only rung could skip: per rung, body tokens in the batches holding a key token."""
    from pipeline.artifact.reader import iter_documents, open_artifact
    from pipeline.models.loading import load_model
    from pipeline.settings import Compute
    from pipeline.text.alignment import hard_key_mask
    from pipeline.text.tokenization import encode_with_offsets

    lm = load_model(model, dtype="float32", device="cpu")
    budget = Compute().window_batch_tokens
    docs = []
    for doc in iter_documents(open_artifact(str(artifact_path))):
        offsets = encode_with_offsets(lm.tokenizer, doc.text).offsets
        keys = np.flatnonzero(hard_key_mask(offsets, doc.span_starts, doc.span_ends)) + 1  # after the BOS
        docs.append((len(offsets) + 1, keys))
    lines = ["| rung | windows | window batches | batches holding a key token | body tokens kept |",
             "| --- | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for w in rungs:
        windows = batches = holding = kept = total = 0
        for n, keys in docs:
            if n <= w:
                continue
            groups = _batches(short_windows(n, w - w // 2, w // 2), budget, w + 1)
            hit = [any(((keys >= x.first) & (keys < x.end)).any() for x in g) for g in groups]
            sizes = [sum(x.end - x.start + 1 for x in g) for g in groups]
            windows += 1 + sum(len(g) for g in groups)
            batches, holding = batches + len(groups), holding + sum(hit)
            total += w + sum(sizes)
            kept += w * bool((keys < w).any()) + sum(s for s, h in zip(sizes, hit, strict=True) if h)
        share = f"{kept / total:.0%}" if total else "n/a (no document is longer)"
        lines.append(f"| {w} | {windows} | {batches} | {holding} | {share} |")
    return "\n".join(lines)


def main() -> None:
    parser = shared.arguments(__doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--artifact", type=Path, default=shared.default_artifact())
    parser.add_argument("--out", type=Path, default=Path("docs/reports/ladder"))
    parser.add_argument(
        "--report", type=shared.output_file, help="a page of its own (default: docs/reports/cost.md)"
    )
    parser.add_argument("--key-only", action="store_true", help="count what a key-only rung could skip")
    args = parser.parse_args()
    if args.key_only:
        print(key_only(args.model, args.artifact, [512, 1024, 2048, 4096]))
        return
    before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        results = {"make score": f"{tmp}/scores.jsonl", "make ladder": str(args.out / "ladder.jsonl")}
        options = {
            "model": args.model,
            "artifact": str(args.artifact),
            "results": results,
            "out": str(args.out),
        }
        rows = runner.run(CASE, options=options, strict=True)
        scored = json.loads(Path(results["make score"]).read_text().splitlines()[-1])
    ladder = json.loads(Path(results["make ladder"]).read_text().splitlines()[-1])
    score_s, ladder_s = (r["work"]["seconds"] for r in rows)
    text = report(args, score_s, ladder_s, scored, ladder, (before, os.getloadavg()[0]))
    publish(text, "cost.md", "ladder", args.report)
    print(text)


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
