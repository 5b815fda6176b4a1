"""``docs/reports/benchmarks-gpu.md`` rendered from the GPU benches' JSON files: ``bench.gpu`` (both
stages against the official code and a plain forward; its files say ``"bench": "gpu_paper"``),
``bench.numerics`` (GPU key tokens against the CPU's; ``gpu_numerics``), ``bench.gpu_levers`` (where
stage 1's time goes, and each lever) and ``bench.startup`` (each stage's start-up, phase by phase).

    python -m bench.gpu_report docs/reports/benchmarks-gpu/*-h100.json   # the page as committed
    python -m bench.gpu_report        # what make bench-gpu, bench-gpu-levers and bench-numerics wrote
"""

from __future__ import annotations

import json
from pathlib import Path

from bench import gpu, gpu_levers, numerics, shared, startup
from bench.gpu_child import WORK
from bench.runner import ROOT
from pipeline.errors import ArgumentParser

REPORT = ROOT / "docs/reports/benchmarks-gpu.md"
SECTIONS = {
    "gpu_paper": gpu.paper_section,
    "gpu_numerics": numerics.section,
    "gpu_levers": gpu_levers.section,
    "startup": startup.section,
}
ORDER = {"gpu_paper": 0, "startup": 1, "gpu_levers": 2, "gpu_numerics": 3}


def report(files: list[Path], out: Path) -> str:
    """``docs/reports/benchmarks-gpu.md`` from the JSON files of ``bench.gpu``, ``bench.numerics`` and
    ``bench.gpu_levers``."""
    results = [json.loads(f.read_text()) for f in files]
    lines = [
        "# Benchmarks on a GPU",
        "",
        "What this page is for: the measured time and memory of both stages at the paper's shapes on one",
        "GPU, against the official code in the same run, and how far GPU key tokens are from the CPU's.",
        "Measured by `make bench-gpu`, `make bench-gpu-levers` and `make bench-numerics` (docs/gpu.md says",
        "how to run them on a machine without network), rendered by `python -m bench.gpu_report` from",
        "their JSON files, kept in docs/reports/benchmarks-gpu/.",
        "",
        "```sh",
        'make bench-gpu ARGS="--texts 3"               # 32767 tokens per text',
        'make bench-gpu ARGS="--texts 1 --tokens 131071"',
        "make bench-gpu-levers                          # after make bench-gpu: stage 1's levers, one process",
        "make bench-numerics",
        "```",
        "",
        "Timed per contender, each alone in its own process: the first text, the steady time per text (median",
        "after the first), the fixed start-up (the whole process less its texts at the steady rate: one text's",
        "run minus a steady text) and the device's peak memory by NVML (every process's memory on the GPU,",
        "the CUDA context included), sampled every 0.1 s. The evaluator is Llama-3.1-8B's exact shape with",
        "random bfloat16 weights (time and memory do not depend on trained weights); its tokenizer is the",
        "embedded SmolLM2's, which is also the reference tokenizer of the texts.",
        "",
    ]
    for result in sorted(results, key=lambda r: (ORDER[r["bench"]], r.get("tokens", 0))):
        lines += SECTIONS[result["bench"]](result)
    if not any(r["bench"] == "gpu_numerics" and not r.get("partial") for r in results):
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
    args = parser.parse_args()
    print(report(args.files or measured(), args.out))


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
