"""The lab above the product, checked as ``tests/project/test_layout.py`` checks the product's layers:
``pipeline/`` < ``studies/`` < ``bench/`` < ``tests/``, each importing only from below. The product
never imports the lab; the studies import no bench case (only its measuring base: ``bench.runner``,
``bench.shared``, ``bench.report``) and no test; the benchmarks import no test; no import cycle inside
the studies or across the studies and the benchmarks; and the test modules share only ``tests.support``
(no test module imports another test module or ``conftest``). Function-level imports count."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import ROOT, cycles_in

LAB = ("pipeline", "studies", "bench", "tests")
# What the studies may import of bench: the measuring base (peak memory, watched child processes)
MEASURING_BASE = ("bench.runner", "bench.shared", "bench.report")  # the runner, what cases share, the pages
SHARED_TEST_MODULE = "tests.support"


def modules(*packages: str) -> dict[str, Path]:
    """Module name -> file, for every module of these top-level packages."""
    out = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def imported(path: Path, module: str) -> set[str]:
    """Every module name a file imports, anywhere in it: ``import a.b`` gives ``a.b``; ``from a import
    b`` gives ``a.b`` and ``a``; a relative import is resolved against the file's own package."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            found |= {base} | {f"{base}.{a.name}" for a in node.names}
    return found


def known(name: str, names: dict[str, Path]) -> str | None:
    """The longest module of ``names`` that ``name`` is or lies in (``a.b.f`` for a function f of a.b)."""
    while name and name not in names:
        name = name.rpartition(".")[0]
    return name or None


def is_in(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def refused_by_the_product(name: str) -> bool:
    return is_in(name, ("studies", "bench", "tests"))


def refused_by_the_studies(name: str) -> bool:
    """A test, or a bench module other than the measuring base (the bare package ``bench`` holds none)."""
    in_bench = is_in(name, ("bench",)) and name != "bench"
    return is_in(name, ("tests",)) or (in_bench and not is_in(name, MEASURING_BASE))


def refused_by_the_benchmarks(name: str) -> bool:
    return is_in(name, ("tests",))


def refused_by_the_tests(name: str) -> bool:
    """``conftest``, or a module of ``tests`` other than the support module (the bare package is none)."""
    in_tests = is_in(name, ("tests",)) and name != "tests"
    return is_in(name, ("conftest",)) or (in_tests and not is_in(name, (SHARED_TEST_MODULE,)))


def wrong_imports(package: str, refused) -> list[str]:
    """``module -> import`` for every import of a package's modules that ``refused`` refuses."""
    return [
        f"{module} -> {name}"
        for module, path in modules(package).items()
        for name in sorted(imported(path, module))
        if refused(name)
    ]


def test_the_product_never_imports_the_lab():
    found = wrong_imports("pipeline", refused_by_the_product)
    assert not found, found


def test_the_studies_import_only_the_measuring_base_of_bench_and_no_test():
    found = wrong_imports("studies", refused_by_the_studies)
    assert not found, found


def test_the_benchmarks_import_no_test():
    found = wrong_imports("bench", refused_by_the_benchmarks)
    assert not found, found


def test_test_modules_share_only_the_support_module():
    """Every module under tests/ (conftest, the support module and the walk script included) imports of
    the tests only ``tests.support``: no test module, no ``conftest``, however imported."""
    found = wrong_imports("tests", refused_by_the_tests)
    assert not found, found


def test_no_import_cycle_in_the_studies_or_across_the_studies_and_the_benchmarks():
    names = modules("studies", "bench")
    edges = {}
    for module, path in names.items():
        targets = {known(name, names) for name in imported(path, module)} - {None, module}
        edges[module] = {t for t in targets if not module.startswith(t + ".")}  # not its own package
    cycles = cycles_in(edges)
    assert not cycles, cycles


def test_the_checks_see_what_they_refuse(tmp_path):
    """What the checks above rely on: function-level, relative and ``from package import module``
    imports are all read, and each rule refuses what it names and lets the rest through."""
    path = tmp_path / "module.py"
    path.write_text(
        "from tests import conftest\n"
        "def f():\n"
        "    import bench.gpu_paper\n"
        "    from .. import test_api\n"
        "    from .support import ROOT\n"
    )
    found = imported(path, "tests.api.module")
    assert {"tests.conftest", "bench.gpu_paper", "tests.test_api", "tests.api.support.ROOT"} <= found
    names = modules("tests")
    assert known("tests.support.ROOT", names) == "tests.support" and known("numpy.linalg", names) is None
    assert cycles_in({"studies.a": {"bench.b"}, "bench.b": {"studies.a"}}) == [
        "studies.a -> bench.b -> studies.a"
    ]
    refusals = {
        refused_by_the_product: (["studies.validate", "bench.runner", "tests.support"], ["pipeline.files"]),
        refused_by_the_studies: (
            ["bench.gpu_paper", "tests.support"],
            ["bench.runner.ROOT", "bench", "pipeline"],
        ),
        refused_by_the_benchmarks: (["tests.support"], ["studies.random_models", "bench.report"]),
        refused_by_the_tests: (
            ["tests.conftest", "conftest", "tests.score.test_score", "tests.api.support"],
            ["tests.support", "tests.support.ROOT", "tests", "bench.runner", "studies"],
        ),
    }
    for rule, (refused, allowed) in refusals.items():
        assert [rule(n) for n in refused + allowed] == [True] * len(refused) + [False] * len(allowed), rule
