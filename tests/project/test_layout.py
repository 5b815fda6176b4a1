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

from tests.support import ROOT, cycles_in, rank

PIPELINE = ROOT / "pipeline"
STUDIES = ROOT / "studies"  # the lab's code, held to the same sizes


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PIPELINE.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The pipeline modules a module imports (``from pipeline.x import y`` counts module ``pipeline.x.y``
    when that is a module, else ``pipeline.x``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pipeline"):
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("pipeline")]
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


def make_targets_running(pattern: str) -> dict[str, str]:
    """Make target -> what its recipe runs: the first match of ``pattern``'s group on its lines."""
    found, target = {}, None
    for line in (ROOT / "Makefile").read_text().splitlines():
        if re.match(r"^[a-z][\w-]*:", line):
            target = line.split(":")[0]
        for ran in re.findall(pattern, line):
            found.setdefault(target, ran)
    return found


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
