"""``docs/reports/benchmarks-gpu.md`` rendered from the GPU benches' JSON files: ``bench.gpu`` (both
stages against the official code and a plain forward; its files say ``"bench": "gpu_paper"``),
``bench.numerics`` (GPU key tokens against the CPU's; ``gpu_numerics``), ``bench.gpu_levers`` (where
stage 1's time goes, and each lever) and ``bench.startup`` (each stage's start-up, phase by phase).

    python -m bench.gpu_report docs/reports/benchmarks-gpu/*-h200-803d062.json \\
        docs/reports/benchmarks-gpu/{gpu-131071,levers,numerics}-h100.json \\
        --superseded docs/reports/benchmarks-gpu/gpu-32767-h{100,200}.json   # the page as committed
    python -m bench.gpu_report        # what make bench-gpu, bench-gpu-levers and bench-numerics wrote
"""

from __future__ import annotations

import json
from pathlib import Path

from bench import gpu, gpu_levers, loogle_decode, numerics, shared, startup
from bench.gpu_child import WORK
from bench.runner import ROOT
from pipeline.errors import ArgumentParser

REPORT = ROOT / "docs/reports/benchmarks-gpu.md"
SECTIONS = {
    "gpu_paper": gpu.paper_section,
    "gpu_numerics": numerics.section,
    "gpu_levers": gpu_levers.section,
    "startup": startup.section,
    "startup_imports": startup.imports_section,
    "loogle_decode": loogle_decode.section,
}
ORDER = {
    "gpu_paper": 0,
    "startup": 1,
    "startup_imports": 2,
    "loogle_decode": 3,
    "gpu_levers": 4,
    "gpu_numerics": 5,
}


def kind(result: dict) -> str:
    """Which bench wrote a result: its ``bench``; ``bench.loogle_decode``'s files name none."""
    return result.get("bench") or ("loogle_decode" if "benchmark_hours" in result else "unknown")


def report(files: list[Path], out: Path, superseded: list[Path] | None = None) -> str:
    """``docs/reports/benchmarks-gpu.md`` from the JSON files of ``bench.gpu``, ``bench.numerics``,
    ``bench.gpu_levers``, ``bench.startup`` and ``bench.loogle_decode``; ``superseded``: the older records
    kept beside them that these replace (named on the page)."""
    results = [json.loads(f.read_text()) for f in files]
    lines = [
        "# Benchmarks on a GPU",
        "",
        "What this page is for: the measured time and memory of both stages at the paper's shapes on one",
        "GPU, against the official code in the same run, how far GPU key tokens are from the CPU's, and",
        "LooGLE's decoding. Measured by `make bench-gpu`, `make bench-gpu-levers`, `make bench-numerics`,",
        "`make bench-startup` and `make bench-loogle-decode` (docs/gpu.md says how to run them on a machine",
        "without network), rendered by `python -m bench.gpu_report` from their JSON files, kept in",
        "docs/reports/benchmarks-gpu/.",
        "",
        "```sh",
        'make bench-gpu ARGS="--texts 3"               # 32767 tokens per text',
        'make bench-gpu ARGS="--texts 1 --tokens 131071"',
        "make bench-gpu-levers                          # after make bench-gpu: stage 1's levers, one process",
        "make bench-numerics",
        "make bench-loogle-decode                       # 8 questions of one 32000-token document",
        "```",
        "",
        "Timed per contender, each alone in its own process: the first text, the steady time per text (median",
        "after the first), the fixed start-up (the whole process less its texts at the steady rate: one text's",
        "run minus a steady text) and the device's peak memory by NVML (every process's memory on the GPU,",
        "the CUDA context included), sampled every 0.1 s. The evaluator is Llama-3.1-8B's exact shape with",
        "random bfloat16 weights (time and memory do not depend on trained weights); its tokenizer is the",
        "embedded SmolLM2's, which is also the reference tokenizer of the texts.",
        "",
        "Rendered from: " + ", ".join(f"`{f.name}`" for f in files) + ".",
        *(
            [f"Kept beside them, superseded by these: {', '.join(f'`{f.name}`' for f in superseded)}."]
            if superseded
            else []
        ),
        "",
    ]
    for result in sorted(results, key=lambda r: (ORDER[kind(r)], r.get("tokens", 0))):
        lines += SECTIONS[kind(result)](result)
    if not any(kind(r) == "gpu_numerics" and not r.get("partial") for r in results):
        lines += [
            "## Key tokens on the GPU against the CPU",
            "",
            "No `make bench-numerics` result in this report.",
            "",
        ]
    text = "\n".join(lines)
    out.write_text(text)
    return text


def main() -> None:
    parser = ArgumentParser(prog=shared.program(), description=__doc__.splitlines()[0])
    parser.add_argument(
        "files", type=Path, nargs="*", help="default: what the benches wrote in their work folders"
    )
    parser.add_argument("--out", type=shared.output_file, default=REPORT)
    parser.add_argument("--superseded", type=Path, nargs="*", default=[], help="older records these replace")
    args = parser.parse_args()
    print(report(args.files or measured(), args.out, args.superseded))


def measured() -> list[Path]:
    """The JSON files the GPU benches wrote in their default work folders."""
    found = [
        *sorted(WORK.glob("gpu-*.json")),
        WORK / "levers.json",
        numerics.WORK / "numerics.json",
    ]
    return [f for f in found if f.is_file()]


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
