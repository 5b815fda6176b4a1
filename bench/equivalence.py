"""How far apart are the values of two stage-1 runs that should give the same artifact? The measurement
behind ``pipeline.artifact.identity.TOLERANCE`` (docs/reproducibility.md).

Compares, value by value (``identity.compare_tables``: |LCL|, |short|, |LSD| and soft-weight
differences, median, p99, p99.9 and max; key flags that differ), the default artifact made on this
machine with:

- artifacts made elsewhere (``--other DIR``, repeatable: e.g. the same `make keytokens` on another CPU);
- stage 1 run again here on the first ``--documents`` documents with another summation order: one
  thread instead of two (``OMP_NUM_THREADS=1``), a smaller ``head_chunk``, ``vocab_tile`` and
  ``window_batch_tokens``, and two stand-ins for another CPU's kernels: torch's own kernels (softmax,
  norms, reductions, and with them the GEMMs' dispatch) without SIMD (``ATEN_CPU_CAPABILITY=default``),
  and MKL's GEMMs on its code path for any x86 CPU (``MKL_CBWR=COMPATIBLE``; ``MKL_ENABLE_INSTRUCTIONS``
  changes nothing on an AMD CPU: measured); and ``compile=on`` (each decoder layer under
  ``torch.compile``), after an eager run for its time, with an empty kernel cache and with the cache
  that run filled (``--variants eager "compile=on, cold cache" "compile=on, warm cache"``). Each runs in
  its own process, into a temporary directory; the key tokens' Jaccard index is reported beside the
  differences.

    make bench-equivalence ARGS="--other ../shared/data/cross-machine"
    make bench-equivalence ARGS="--documents 2 --variants threads=1 head_chunk=512"

Prints a Markdown table (one row per comparison and value column) and, with ``--out``, writes the
numbers as JSON.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

from bench import runner, shared
from pipeline.artifact.identity import TOLERANCE, compare_tables, differences
from pipeline.artifact.reader import open_artifact

# Summation orders to try: a name, the stage's overrides and the environment it runs in.
VARIANTS = {
    "threads=1": ([], {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}),
    "head_chunk=512": (["head_chunk=512"], {}),
    "vocab_tile=4096": (["vocab_tile=4096"], {}),
    "window_batch_tokens=2048": (["window_batch_tokens=2048"], {}),
    "ATEN_CPU_CAPABILITY=default": ([], {"ATEN_CPU_CAPABILITY": "default"}),
    "MKL_CBWR=COMPATIBLE": ([], {"MKL_CBWR": "COMPATIBLE"}),
    # torch.compile (``compile=on``): eager again for its time, then compiled with an empty kernel cache
    # (the run's own, beside its output) and with the cache that run filled
    "eager": ([], {}),
    "compile=on, cold cache": (["compile=on"], {}),
    "compile=on, warm cache": (["compile=on"], {}),
}
KERNELS = "compile-cache"  # the compiled variants' kernel cache, in the runs' temporary directory


def command(name: str, documents: int, out: str) -> tuple[list[str], dict[str, str]]:
    """Stage 1 on the first ``documents`` documents with the variant's overrides, into ``out``, and
    the environment it runs in."""
    overrides, env = VARIANTS[name]
    if name.startswith("compile=on"):
        env = {**env, "TORCHINDUCTOR_CACHE_DIR": str(Path(out) / KERNELS)}
    argv = [sys.executable, "-m", "pipeline.commands.keytokens", f"num_documents={documents}"]
    return [*argv, f"output_dir={out}", f"name={folder(name)}", "progress=false", *overrides], env


CASE = runner.Case("equivalence", contenders=tuple(VARIANTS), sizes=(2,), command=command)


def folder(name: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", name.replace("=", "-").lower())


def comparison(label: str, base, other) -> dict:
    """One comparison: the value differences, the key flags and the verdict."""
    report = compare_tables(base, other)
    verdict = differences(other.identity, base.identity) if label.startswith("other:") else []
    return {
        "label": label,
        **report,
        "key_tokens_jaccard": shared.key_jaccard(base, other),
        "same_artifact_problems": verdict,
        "exact": base.contents == other.contents,
    }


def markdown(rows: list[dict]) -> str:
    lines = [
        "| compared with the default artifact | documents | column | values | differing | median | p99 | p99.9 | max | key flags differing | key tokens' Jaccard |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        for name, q in row["columns"].items():
            flags = sum(row["key_flags_differ"].values())
            lines.append(
                f"| {row['label']} | {len(row['documents'])} | {name} | {q['n']} | {q['differing']} | "
                f"{q['median']:.2g} | {q['p99']:.2g} | {q['p999']:.2g} | {q['max']:.2g} | {flags} | "
                f"{'' if row['key_tokens_jaccard'] is None else round(row['key_tokens_jaccard'], 4)} |"
            )
    worst = {name: max(r["columns"][name]["max"] for r in rows) for name in TOLERANCE}
    lines.append("")
    lines.append(
        "largest difference per column: "
        + ", ".join(
            f"{k} {v:.3g} (tolerance {TOLERANCE[k]:g}, {f'{TOLERANCE[k] / v:.0f}x' if v else 'exact'})"
            for k, v in worst.items()
        )
    )
    return "\n".join(lines)


def main() -> None:
    parser = shared.arguments(__doc__)
    parser.add_argument("--artifact", default=str(shared.default_artifact()))
    parser.add_argument("--other", action="append", default=[], help="an artifact made elsewhere")
    parser.add_argument(
        "--documents", type=shared.whole(1), default=CASE.sizes[0], help="documents of each variant run"
    )
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--out", type=shared.output_file, default=None, help="write the numbers as JSON here")
    args = parser.parse_args()
    base = open_artifact(args.artifact)
    rows = [comparison(f"other: {shared.relative(path)}", base, open_artifact(path)) for path in args.other]
    with tempfile.TemporaryDirectory(prefix="equivalence-") as tmp:
        runs = runner.run(
            CASE, contenders=args.variants, sizes=[args.documents], options={"out": tmp}, strict=True
        )
        for run in runs:
            row = comparison(run["contender"], base, open_artifact(Path(tmp) / folder(run["contender"])))
            rows.append(
                row
                | {
                    "wall_seconds": round(run["work"]["seconds"], 1),
                    "cpu_seconds": round(run["work"]["cpu_s"], 1),
                }
            )
            print(f"{run['contender']}: {row['columns']['lsd']['max']:.3g} max |LSD| difference", flush=True)
    print(markdown(rows))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"artifact": shared.relative(args.artifact), "rows": rows}, indent=1) + "\n"
        )
        print(f"wrote {args.out}")


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
