"""The benchmarks' graph, checked as ``tests/project/test_layout.py`` checks the pipeline's: ``bench/`` may
import ``pipeline/``, never the other way; inside ``bench/`` no import cycle, and every import runs
down a declared order of layers (function-level imports count)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import ROOT, cycles_in

BENCH = ROOT / "bench"
# Lowest first; a module in none is a case (one bench). Inside a layer only the base may import its
# own layer: a case imports no other case, a builder no other builder.
LAYERS = [
    # measuring (peak memory, watched child processes, the machine), the runner, the report pages,
    # the GPU child and its device sampler, the rehearsals' checks
    ("base", {"harness", "report", "gpu_child"}),
    # cases whose parts other cases build on: the rehearsal's models, tokenizers and data sets
    # (rehearse_long, gpu_paper), the drop-in comparison (compare_official)
    ("builders", {"compare_dropin"}),
    ("gpu work folder", {"gpu_paper"}),  # its evaluator and texts are gpu_levers'
    ("cases", set()),
    ("renderers", {"gpu_report"}),  # renders the GPU cases' JSON into one page
]
RANKS = {name: rank for rank, (name, _) in enumerate(LAYERS)}


def layer(module: str) -> str:
    return next((name for name, members in LAYERS if module in members), "cases")


def bench_imports(path: Path) -> set[str]:
    """The bench modules a file imports (``from bench import x`` and ``from bench.x import y``: ``x``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "bench":
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bench."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("bench.")}
    return found


def graph() -> dict[str, set[str]]:
    modules = {p.stem: p for p in sorted(BENCH.glob("*.py")) if p.stem != "__init__"}
    return {m: bench_imports(p) - {m} for m, p in modules.items()}


def test_every_bench_import_runs_down_the_layers():
    edges = graph()
    assert set().union(*edges.values()) <= set(edges), "an import of a bench module that does not exist"
    wrong = [
        f"{m} ({layer(m)}) -> {t} ({layer(t)})"
        for m, targets in edges.items()
        for t in targets
        if RANKS[layer(t)] > RANKS[layer(m)] or (layer(t) == layer(m) != "base")
    ]
    assert not wrong, wrong


def test_no_import_cycle_in_bench():
    cycles = cycles_in(graph())
    assert not cycles, cycles


def imported_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_the_pipeline_never_imports_bench():
    found = [
        f"{path.relative_to(ROOT)} -> {name}"
        for path in sorted((ROOT / "pipeline").rglob("*.py"))
        for name in imported_names(path)
        if name == "bench" or name.startswith("bench.")
    ]
    assert not found, found


# What only the harness may use to measure: processes, sampler threads, resource usage, the machine.
MEASURING = {"subprocess", "threading", "resource", "psutil", "platform", "pynvml"}
MAY_MEASURE = {"harness": MEASURING, "gpu_child": {"psutil"}}  # gpu_child: its process's start time


def test_only_the_harness_times_samples_memory_or_records_the_machine():
    found = [
        f"bench/{path.name}: {name}"
        for path in sorted(BENCH.glob("*.py"))
        for name in sorted({n.split(".")[0] for n in imported_names(path)} & MEASURING)
        if name not in MAY_MEASURE.get(path.stem, set())
    ]
    assert not found, found
