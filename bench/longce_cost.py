"""The cost of LongCE against CE per training step, side by side in one run (issue #11).

One training step (forward with gradient, the weights, backward, an AdamW step with learning rate 0
so that every step sees the same model) of SmolLM2-135M on one sequence of the shipped GovReport
sample, with each loss: CE, LongCE with the artifact's weights (given with the batch, as
`make finetune` precomputes them), and LongCE with the model's own weights for each (K, d) asked.
The losses are timed in turn (the order rotating), ``--repeats`` times, medians reported: the
wall time and the CPU time of the process (user + system, all threads), which a busy machine
disturbs far less than the wall time (on a shared machine, compare the CPU times). Memory: the peak resident set size during a step above the one before it (a sampler
thread, every 5 ms; freed heap returned with malloc_trim before each step); on a GPU, the peak of
``torch.cuda.max_memory_allocated`` above the allocation before the step.

    make bench-longce
    .venv/bin/python -m bench.longce_cost --tokens 2048 --configs 1024:1024 512:512 256:64 --repeats 3

With K + d >= the sequence length no window is needed (the window at 0 is the full context, taken
from the pass with gradient): LongCE(self) then costs what CE does.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

from bench.harness import ROOT, PeakMemory, arguments, default_artifact, stamp
from bench.report import publish


def training_sequence(lm, n_tokens: int, artifact: Path):
    """BOS and the first tokens of the first sample document long enough, and the artifact's
    weights for them (when the artifact exists; otherwise weights drawn in [1, 5])."""
    import numpy as np
    import torch

    from pipeline.text.corpus import Document
    from pipeline.training.sequences import build_sequences

    rows = [json.loads(line) for line in (ROOT / "data/govreport-sample.jsonl").open(encoding="utf-8")]
    weights, source = None, "random weights in [1, 5] (no artifact)"
    if (artifact / "manifest.json").exists():
        from pipeline.artifact.reader import load_artifact
        from pipeline.training.longce import ArtifactWeights

        weights, source = ArtifactWeights(load_artifact(artifact)), f"artifact {artifact.name}"
    docs = [Document(r["id"], r["text"]) for r in rows]
    if weights is not None:
        docs = [d for d in docs if d.id in weights.views]
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


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--configs", nargs="+", default=["1024:1024", "512:512"], help="K:d of LongCE(self)")
    parser.add_argument("--gamma", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--artifact", default=str(default_artifact()))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", help="a page of its own (default: docs/reports/cost.md)")
    args = parser.parse_args()

    import torch

    from pipeline.definition import KeyTokenDefinition
    from pipeline.models.loading import load_model
    from pipeline.training.longce import LongCE, LongCESettings

    lm = load_model(args.model, dtype="float32", device=args.device)
    model = lm.model.train()
    ids, weights, where = training_sequence(lm, args.tokens, Path(args.artifact))
    ids, weights = ids.to(lm.device), weights.to(lm.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0, weight_decay=0.0)
    losses = {
        "CE": LongCE(LongCESettings(source="ce")),
        "LongCE(artifact)": LongCE(LongCESettings(source="artifact")),
    }
    for config in args.configs:
        K, d = (int(x) for x in config.split(":"))
        definition = KeyTokenDefinition(K=K, d=d, gamma=args.gamma, short_window_bos=False)
        losses[f"LongCE(self) K={K} d={d}"] = LongCE(LongCESettings(source="self", definition=definition))
    for loss_fn in losses.values():  # Adam's state, the scorer's guard: allocated before measuring
        step(model, optimizer, loss_fn, ids[:, :64], weights[:, :63])
    seconds = {name: [] for name in losses}
    cpu = {name: [] for name in losses}
    memory = {name: 0.0 for name in losses}
    names = list(losses)
    for r in range(args.repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            with PeakMemory(interval=0.005, cuda=lm.device.type == "cuda") as peak:
                start, start_cpu = time.perf_counter(), time.process_time()
                step(model, optimizer, losses[name], ids, weights)
                if lm.device.type == "cuda":
                    torch.cuda.synchronize()
                seconds[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - start_cpu)
            memory[name] = max(memory[name], peak.above_start_gb)
            print(f"  {name}: {seconds[name][-1]:.1f} s wall, {cpu[name][-1]:.1f} s CPU, "
                  f"peak +{peak.above_start_gb:.2f} GB", flush=True)  # fmt: skip
    report(args, lm, seconds, cpu, memory, where)


def report(args, lm, seconds, cpu, memory, where) -> None:
    """Print the table and write it, with the settings, to ``args.out``."""
    import torch

    ce, ce_cpu = statistics.median(seconds["CE"]), statistics.median(cpu["CE"])
    lines = [
        f"| loss | CPU s per step (median of {args.repeats}) | / CE | wall s per step | / CE "
        "| peak memory above the step's start | / CE |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in seconds:
        t, c = statistics.median(seconds[name]), statistics.median(cpu[name])
        mem_ratio = memory[name] / memory["CE"] if memory["CE"] > 0 else float("nan")
        lines.append(
            f"| {name} | {c:.1f} | {c / ce_cpu:.3f} | {t:.1f} | {t / ce:.3f} | {memory[name]:.2f} GB | {mem_ratio:.2f} |"
        )
    lines += [
        "",
        f"{args.model} (float32, {lm.device}), one sequence of {args.tokens} tokens ({where}), gamma {args.gamma:g}; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs; "
        f"load average at the end {os.getloadavg()[0]:.1f}; {stamp()}",
    ]
    print("\n" + "\n".join(lines))
    title = "# LongCE against CE: cost of a training step (`make bench-longce`)"
    command = "python bench/longce_cost.py " + " ".join(sys.argv[1:]).replace(
        f"{ROOT}/", ""
    )  # no machine path
    text = "\n".join([title, "", f"`{command.strip()}`", "", *lines, ""])
    publish(text, "cost.md", "longce", args.out)


if __name__ == "__main__":
    main()
