"""The cost of LongCE against CE per training step, side by side in one run.

One training step (forward with gradient, the weights, backward, an AdamW step with learning rate 0
so that every step sees the same model) of SmolLM2-135M on one sequence of the shipped GovReport
sample, with each loss: CE, LongCE with the artifact's weights (given with the batch, as
`make finetune` precomputes them), and LongCE with the model's own weights for each (K, d) asked.
Each loss runs in its own process, after one short warm-up step (Adam's state, the scorer's guard),
``--repeats`` steps, medians reported: the wall time and the CPU time of the process (user + system,
all threads), which a busy machine disturbs far less than the wall time (on a shared machine,
compare the CPU times). Memory: the peak resident set size during a step above the one before it
(sampled every 5 ms; freed heap returned with malloc_trim before each step); on a GPU, the peak of
``torch.cuda.max_memory_allocated`` above the allocation before the step.

    make bench-longce
    make bench-longce ARGS="--tokens 2048 --configs 1024:1024 512:512 256:64 --repeats 3"

With K + d >= the sequence length no window is needed (the window at 0 is the full context, taken
from the pass with gradient): LongCE(self) then costs what CE does.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from bench import runner, shared
from bench.report import publish


def training_sequence(lm, n_tokens: int, artifact: Path):
    """BOS and the first tokens of the first sample document long enough, and the artifact's
    weights for them (when the artifact exists; otherwise weights drawn in [1, 5])."""
    import numpy as np
    import torch

    from pipeline.text.corpus import Document
    from pipeline.training.sequences import build_sequences

    rows = [json.loads(line) for line in (shared.ROOT / "data/govreport-sample.jsonl").open(encoding="utf-8")]
    weights, source = None, "random weights in [1, 5] (no artifact)"
    if (artifact / "manifest.json").exists():
        from pipeline.artifact.reader import load_artifact
        from pipeline.training.longce import ArtifactWeights

        weights, source = ArtifactWeights(load_artifact(artifact)), f"artifact {artifact.name}"
    docs = [Document(r["id"], r["text"]) for r in rows]
    if weights is not None:
        docs = [d for d in docs if d.id in weights.documents]
    sequences, _ = build_sequences(docs, lm.tokenizer, max_length=n_tokens, weights=weights)
    seq = next((s for s in sequences if len(s.input_ids) == n_tokens), None)
    if seq is None:
        raise SystemExit(f"no sample document has {n_tokens} tokens")
    ids = torch.tensor([seq.input_ids])
    if seq.weights is None:
        w = np.random.default_rng(0).uniform(1, 5, n_tokens - 1)
    else:
        w = np.asarray(seq.weights)
    return ids, torch.tensor(w, dtype=torch.float32)[None], f"{seq.doc_id}, {source}"


def step(model, optimizer, loss_fn, ids, weights) -> None:
    out = loss_fn(model, ids, weights=weights)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)


def loss(name: str, gamma: float):
    """The loss a contender names: CE, LongCE(artifact) or LongCE(self) K=<K> d=<d>."""
    from pipeline.definition import KeyTokenDefinition
    from pipeline.training.longce import LongCE, LongCESettings

    if name in ("CE", "LongCE(artifact)"):
        return LongCE(LongCESettings(source="ce" if name == "CE" else "artifact"))
    K, d = map(int, re.fullmatch(r"LongCE\(self\) K=(\d+) d=(\d+)", name).groups())
    definition = KeyTokenDefinition(K=K, d=d, gamma=gamma, short_window_bos=False)
    return LongCE(LongCESettings(source="self", definition=definition))


def setup(name: str, tokens: int, model: str, gamma: float, artifact: str, device: str) -> runner.Work:
    """One training step with the loss ``name``, after a short one (Adam's state, the scorer's guard)."""
    import torch

    from pipeline.models.loading import load_model

    lm = load_model(model, dtype="float32", device=device)
    ids, weights, where = training_sequence(lm, tokens, Path(artifact))
    ids, weights = ids.to(lm.device), weights.to(lm.device)
    optimizer = torch.optim.AdamW(lm.model.train().parameters(), lr=0.0, weight_decay=0.0)
    loss_fn = loss(name, gamma)
    step(lm.model, optimizer, loss_fn, ids[:, :64], weights[:, :63])
    facts = {"sequence": where, "device": str(lm.device), "threads": torch.get_num_threads()}

    def work() -> dict:
        step(lm.model, optimizer, loss_fn, ids, weights)
        return facts

    return work


CASE = runner.Case(
    "longce",
    contenders=("CE", "LongCE(artifact)", "LongCE(self) K=1024 d=1024", "LongCE(self) K=512 d=512"),
    sizes=(2048,),
    setup=setup,
    interval=0.005,
)


def main() -> None:
    if runner.child(CASE):
        return
    parser = shared.arguments(__doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=shared.whole(2), default=CASE.sizes[0])
    parser.add_argument("--configs", nargs="+", default=["1024:1024", "512:512"], help="K:d of LongCE(self)")
    parser.add_argument("--gamma", type=shared.above(0), default=5.0)
    parser.add_argument("--repeats", type=shared.whole(1), default=2)
    parser.add_argument("--artifact", default=str(shared.default_artifact()))
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--out", type=shared.output_file, help="a page of its own (default: docs/reports/cost.md)"
    )
    args = parser.parse_args()
    selves = [f"LongCE(self) K={k} d={d}" for k, d in (c.split(":") for c in args.configs)]
    options = {"model": args.model, "gamma": args.gamma, "artifact": args.artifact, "device": args.device}
    rows = runner.run(CASE, contenders=["CE", "LongCE(artifact)", *selves], sizes=[args.tokens],
                      options=options, repeats=args.repeats, strict=True)  # fmt: skip
    report(args, rows)


def report(args, rows: list[dict]) -> None:
    """Print the table and write it, with the settings, to ``args.out``."""
    import torch

    ce = rows[0]["work"]
    lines = [
        f"| loss | CPU s per step (median of {args.repeats}) | / CE | wall s per step | / CE "
        "| peak memory above the step's start | / CE |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        w = r["work"]
        t, c, memory = w["seconds"], w["cpu_s"], w["above_start_bytes"] / 1e9
        mem_ratio = (
            w["above_start_bytes"] / ce["above_start_bytes"] if ce["above_start_bytes"] > 0 else float("nan")
        )
        lines.append(
            f"| {r['contender']} | {c:.1f} | {c / ce['cpu_s']:.3f} | {t:.1f} | {t / ce['seconds']:.3f} "
            f"| {memory:.2f} GB | {mem_ratio:.2f} |"
        )
    first = rows[0]
    lines += [
        "",
        f"{args.model} (float32, {first['device']}), one sequence of {args.tokens} tokens ({first['sequence']}), "
        f"gamma {args.gamma:g}; torch {torch.__version__}, {first['threads']} threads, {os.cpu_count()} CPUs; "
        f"load average at the end {os.getloadavg()[0]:.1f}; {runner.stamp()}",
    ]
    print("\n" + "\n".join(lines))
    title = "# LongCE against CE: cost of a training step (`make bench-longce`)"
    command = ("make bench-longce " + (f'ARGS="{" ".join(sys.argv[1:])}"' if sys.argv[1:] else "")).strip()
    text = "\n".join([title, "", f"`{command.replace(f'{shared.ROOT}/', '')}`", "", *lines, ""])
    publish(text, "cost.md", "longce", args.out)


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
