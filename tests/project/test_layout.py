"""The architecture, checked (docs/architecture.md): every module of ``pipeline/`` belongs to a layer
and imports only from its own layer or below, with no exception; no import cycle; every make target
that runs a pipeline command runs ``longppl <its name>``, one module of ``pipeline/commands/``, and only
that package imports Hydra; every package says in its docstring what it holds and what it may
import; modules under 400 lines, functions under 60, and no issue numbers in the code, of ``studies/``
too. Function-level imports count: they hide a cycle, not remove it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support import LAYERS, RANKS, ROOT, cycles_in, make_targets_running, rank

PIPELINE = ROOT / "pipeline"
STUDIES = ROOT / "studies"  # the lab's code, held to the same sizes


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PIPELINE.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def imports(path: Path, known: dict[str, Path], prefixes: tuple[str, ...] = ("pipeline",)) -> set[str]:
    """The pipeline modules a module imports (``from pipeline.x import y`` counts module ``pipeline.x.y``
    when that is a module, else ``pipeline.x``); ``prefixes``: the top packages followed."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(prefixes):
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith(prefixes)]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
                break
    return found


def test_every_import_runs_down_the_layers():
    known = modules()
    upward = []
    for module, path in known.items():
        for target in imports(path, known) - {module, "pipeline"}:
            if rank(target) > rank(module) and not module.startswith(target + "."):
                upward.append(f"{module} -> {target}")
    assert not upward, upward


def test_a_cycle_is_found():
    assert cycles_in({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a -> b -> c -> a"]
    assert cycles_in({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    known = modules()
    edges = {
        m: {t for t in imports(p, known) if t != m and not m.startswith(t + ".")} for m, p in known.items()
    }
    cycles = cycles_in(edges)
    assert not cycles, cycles


def test_sizes_and_no_issue_numbers():
    too_long = []
    for path in [*PIPELINE.rglob("*.py"), *STUDIES.rglob("*.py")]:
        text = path.read_text()
        lines = text.count("\n")
        if lines > 400:
            too_long.append(f"{path.relative_to(ROOT)}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.end_lineno - node.lineno >= 60
            ):
                too_long.append(
                    f"{path.relative_to(ROOT)}:{node.name}: {node.end_lineno - node.lineno + 1} lines"
                )
    assert not too_long, too_long
    numbered = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in [*PIPELINE.rglob("*"), *STUDIES.rglob("*")]
        if p.suffix in (".py", ".j2")
        for i, line in enumerate(p.read_text().splitlines(), start=1)
        if re.search(r"\b[Ii]ssues? #\d+|\(#\d+\)", line)
    ]
    assert not numbered, numbered


def test_layers_cover_every_module():
    for module in modules():
        rank(module)  # raises for a module in no layer


def test_one_command_module_per_make_target():
    """Every make target that runs the pipeline runs ``longppl <its name>``, never a module of
    ``pipeline`` (``python -m``, ``torchrun -m``); every module of ``pipeline/commands/`` but the shared
    shell is a subcommand of ``longppl`` named after it (``-`` for ``_``) and some target's."""
    from pipeline.cli import commands

    assert not make_targets_running(r"-m (pipeline[\w.]*)"), "a target runs pipeline with -m, not longppl"
    runs = make_targets_running(r"/longppl ([\w-]+)")
    wrong = {t: c for t, c in runs.items() if c != t}
    for suffix in ("-all", "-official"):  # a target that runs its base target's command for several inputs
        wrong = {t: c for t, c in wrong.items() if c != t.removesuffix(suffix)}
    assert not wrong, wrong
    stems = {p.stem for p in (PIPELINE / "commands").glob("*.py")} - {"__init__", "shell"}
    modules_ = {stem.replace("_", "-") for stem in stems}
    assert modules_ == set(runs.values())
    assert modules_ == set(commands())


def test_only_the_commands_import_hydra():
    found = []
    for path in sorted(PIPELINE.rglob("*.py")):
        if path.parent.name == "commands":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            found += [
                f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in ("hydra", "omegaconf")
            ]
    assert not found, found


def test_every_package_says_what_it_holds_and_what_it_may_import():
    """Each package's docstring: what it holds (more than a placeholder) and the layers it may import
    (a sentence naming its own layer's rank: "May import: ...")."""
    missing = []
    for init in sorted(PIPELINE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        if len(doc) < 80 or "TODO" in doc or "May import:" not in doc:
            missing.append(str(init.relative_to(ROOT)))
    assert not missing, missing


# ----------------------------------------------------------------------------------------------
# The picture of the import graph on docs/architecture.md

LAB = ("bench base", "studies", "bench", "tests")  # the lab's layers, above the product
BENCH_BASE = ("bench.runner", "bench.shared", "bench.report")  # what the studies may use of bench/


def layer_of(module: str) -> str:
    """A module's layer: the product's (``rank``), the bench's measuring base, or the lab package."""
    top = module.split(".")[0]
    if module in BENCH_BASE:
        return "bench base"
    return top if top in LAB else next(name for name, r in RANKS.items() if r == rank(module))


def layer_graph() -> str:
    """The import graph between layers as a Mermaid flowchart: each layer with its packages, and an
    arrow from a layer to each layer it imports that no import through a third layer accounts for (the
    transitive reduction; ``python -m tests.project.test_layout`` prints it)."""
    known = {
        **modules(),
        **{m: p for top in ("studies", "bench", "tests") for m, p in package_modules(top).items()},
    }
    found = {
        (layer_of(m), layer_of(t))
        for m, p in known.items()
        for t in imports(p, known, prefixes=("pipeline", "studies", "bench", "tests"))
        - {"pipeline"}  # lazy API
        if layer_of(t) != layer_of(m)
    }
    edges = transitive_reduction(found)
    order = [*dict.fromkeys(name for name, _ in LAYERS), *LAB]
    members = {name: sorted({packages_of(m) for m in known if layer_of(m) == name}) for name in order}
    lines = ["```mermaid", "flowchart BT"]
    lines += [f'  {node(name)}["{name}: {", ".join(members[name])}"]' for name in order if members[name]]
    lines += [
        f"  {node(a)} --> {node(b)}"
        for a, b in sorted(edges, key=lambda e: (order.index(e[0]), order.index(e[1])))
    ]
    return "\n".join([*lines, "```"])


def node(layer: str) -> str:
    """A layer's Mermaid node id (no spaces)."""
    return layer.replace(" ", "_")


def transitive_reduction(edges: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The edges ``a -> b`` of an acyclic graph with no other path from ``a`` to ``b``."""

    def reaches(start: str, goal: str) -> bool:
        todo, seen = [start], set()
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            seen.add(node)
            todo += [b for a, b in edges if a == node and b not in seen]
        return False

    nodes = {x for edge in edges for x in edge}
    return {
        (a, b)
        for a, b in edges
        if not any(c not in (a, b) and (a, c) in edges and reaches(c, b) for c in nodes)
    }


def packages_of(module: str) -> str:
    """``pipeline/score/engine.py`` is shown as ``score/``; a top module as its name."""
    parts = module.split(".")
    if module == "pipeline.commands.shell" or module in BENCH_BASE:
        return ".".join(parts[-2:]) if module in BENCH_BASE else "commands.shell"
    if parts[0] in LAB:
        return f"{parts[0]}/"
    path = ROOT.joinpath(*parts[:2])
    return f"{parts[1]}/" if len(parts) > 1 and path.is_dir() else (parts[1] if len(parts) > 1 else parts[0])


def package_modules(top: str) -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / top).rglob("*.py")):
        out[".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")] = path
    return out


def test_the_architecture_page_shows_the_import_graph_as_it_is():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert layer_graph() in page, "docs/architecture.md: paste `python -m tests.project.test_layout`'s graph"


if __name__ == "__main__":
    print(layer_graph())


# Role packages: a module there is named after the concept it serves (the score concept's command, job,
# results file and summary are all score.py); elsewhere a module's file name is its concept, once.
ROLE_PACKAGES = ("commands", "jobs", "results", "reporting", "bench")  # bench: a case per target
SAME_ROLE = {"identity.py": {"pipeline/artifact", "pipeline/models"}}  # an artifact's and a model's identity


def test_one_name_per_concept():
    """No two modules of pipeline/, studies/ and bench/ share a file name, but in the role packages and
    the declared pairs of the same role."""
    places: dict[str, list[str]] = {}
    for top in ("pipeline", "studies", "bench"):
        for path in (ROOT / top).rglob("*.py"):
            folder = path.parent.relative_to(ROOT).as_posix()
            if path.name not in ("__init__.py", "__main__.py") and path.parent.name not in ROLE_PACKAGES:
                places.setdefault(path.name, []).append(folder)
    shared = {
        name: folders
        for name, folders in places.items()
        if len(folders) > 1 and set(folders) != SAME_ROLE.get(name, set())
    }
    assert not shared, shared


def test_every_command_is_thin():
    """A command module parses its settings once, calls one library function and prints through
    reporting/: at most 25 lines."""
    long = {
        path.name: len(path.read_text().splitlines())
        for path in (PIPELINE / "commands").glob("*.py")
        if path.stem not in ("__init__", "shell") and len(path.read_text().splitlines()) > 25
    }
    assert not long, long
