"""The benchmarks' graph, checked as ``tests/project/test_layout.py`` checks the pipeline's: ``bench/`` may
import ``pipeline/``, never the other way; inside ``bench/`` no import cycle, every import runs down a
declared order of layers (function-level imports count), and a case imports no other case. Each case
(a module with a ``CASE``) is run by the make target named after it, and every bench target runs its case."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support import ROOT, cycles_in, make_targets_running

BENCH = ROOT / "bench"
# Lowest first; a module in none is a case (one bench). Inside a layer only the base may import its
# own layer: a case imports no other case.
LAYERS = [
    # the runner (the one clock, watched processes, the machine), what the cases share, the report pages,
    # the GPU child
    ("base", {"runner", "shared", "report", "gpu_child"}),
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


# What only the runner may use to measure: processes, sampler threads, resource usage, the machine.
MEASURING = {"subprocess", "threading", "concurrent", "resource", "psutil", "platform", "pynvml"}


def test_only_the_runner_times_samples_memory_or_records_the_machine():
    found = [
        f"bench/{path.name}: {name}"
        for path in sorted(BENCH.glob("*.py"))
        for name in sorted({n.split(".")[0] for n in imported_names(path)} & MEASURING)
        if path.stem != "runner"
    ]
    assert not found, found


def test_only_the_runner_reads_a_clock():
    """Durations come from the runner's one clock (``runner.Clock``): no other module reads
    ``time.perf_counter`` or ``time.process_time`` (``time.time`` stamps a moment, e.g. a process's start)."""
    found = [
        f"bench/{path.name}: time.{node.attr}"
        for path in sorted(BENCH.glob("*.py"))
        if path.stem != "runner"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr in ("perf_counter", "process_time", "monotonic")
    ]
    assert not found, found


def cases() -> set[str]:
    """The modules of bench/ that declare a ``CASE``."""
    return {
        path.stem
        for path in BENCH.glob("*.py")
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "CASE" for t in node.targets)
    }


# Targets that run a case with a size preset (`make bench` is `make bench-official` itself).
PRESETS = {"bench-quick": "bench.official"}


def test_every_bench_target_runs_the_case_of_its_name_and_every_case_has_one():
    runs = make_targets_running(r"-m (bench[\w.]*)")
    named = {t: m for t, m in runs.items() if t not in PRESETS}
    wrong = {t: m for t, m in named.items() if m != f"bench.{t.removeprefix('bench-').replace('-', '_')}"}
    assert not wrong, wrong
    assert {runs[t] for t in PRESETS} <= set(named.values())
    assert {m.removeprefix("bench.") for m in named.values()} == cases()
    assert re.search(r"^bench: bench-official$", (ROOT / "Makefile").read_text(), re.M)


def test_each_case_is_named_after_its_module():
    import importlib

    for name in cases():
        assert importlib.import_module(f"bench.{name}").CASE.name == name
