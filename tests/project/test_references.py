"""References that lead somewhere: nothing the repository ships names a path of one machine, or a file
or module of this repository that does not exist. Each offender is reported as ``file:line: what``.

- **Machine paths** (``/root/``, ``/home/``, ``/tmp/``, ``/work/``, ``/Users/``, ``/var/folders/``,
  ``C:\\``): in every text file under docs/ (the manual, the reports and their committed data), conf/,
  the README and the Makefile, and in the comments and docstrings of pipeline/, studies/ and bench/.
  A record keeps a path relative to the repository (``pipeline.files.recorded_path``), ``~/`` for the
  caches, or a placeholder (``$WORK``, ``<dir>``).
- **Files and modules that do not exist**: a path under one of the repository's top folders
  (``pipeline/models/attention.py``, ``conf/x.yaml``, ``docs/x.md``, ``tests/...``, ``bench/...``,
  ``data/...``) must exist; a dotted name (``pipeline.x.y``, ``studies.x``, ``bench.x``, ``tests.x``)
  must be a module, or its longest module prefix followed by a name that module defines at its top
  level (``pipeline.api.score``: module ``pipeline.api``, function ``score``), read statically (no
  import), so the check follows renames as they happen. ``<name>``, ``*`` and ``...`` are wildcards
  and ``{a,b}`` a list: some file must match. Checked in the Markdown of docs/ and the README, conf/,
  the Makefile and those comments and docstrings; not in the committed report data (JSON, logs),
  which record the code of the commit that made them (an import trace names the modules imported
  then). Names of other repositories' files start elsewhere (LooGLE's
  ``Prediction/pred_opensource_models.py``, the official ``perplexity.py``) or are listed in
  ``ELSEWHERE`` with the reason, as are the files a command writes when it runs.
"""

from __future__ import annotations

import ast
import fnmatch
import io
import itertools
import re
import tokenize
from functools import cache
from pathlib import Path

from tests.support import ROOT

TOP_FOLDERS = ("pipeline", "studies", "bench", "tests", "conf", "docs", "data", ".ci")
PACKAGES = ("pipeline", "studies", "bench", "tests")
CODE_FOLDERS = ("pipeline", "studies", "bench")
TEXT_SUFFIXES = {".md", ".json", ".jsonl", ".log", ".txt", ".csv", ".html", ".yaml", ".yml", ".py", ".j2"}
# The last part of a dotted name that is a file's suffix: `bench.md` is a page, not module `bench`.
FILE_SUFFIXES = {s.lstrip(".") for s in TEXT_SUFFIXES} | {"png", "sh", "toml", "parquet", "gguf", "cfg"}
# Names of files that are not in this repository on purpose (fnmatch patterns), each with why: another
# repository's files under a name that starts like ours, and files a command writes when it runs.
ELSEWHERE: dict[str, str] = {
    "conf/refresh/official-*.jsonl": "the official refreshes' records, written by `record=true` on a GPU",
    "pipeline/conf*": "conf/ as an installed wheel carries it (setup.py maps it there)",
    "pipeline/data*": "data/ as an installed wheel carries it (setup.py maps it there)",
}

MACHINE_PATH = re.compile(
    r"(?<![\w.~$/-])(?:/root/|/home/|/tmp/|/work/|/Users/|/var/folders/)|(?<![\w])[A-Za-z]:\\{1,2}[\w.]"
)
FOLDERS = "|".join(re.escape(f) for f in TOP_FOLDERS)
FILE_REF = re.compile(rf"(?<![\w./~$-])(?:{FOLDERS})/(?:[\w.*/+-]|<[^<>\s]*>|\{{[^{{}}\s]*\}})*")
DOTTED_REF = re.compile(
    rf"(?<![\w./$-])(?:{'|'.join(PACKAGES)})(?:\.(?:[A-Za-z_]\w*|\{{[\w, ]*\}}))+(?![\w-])"
)


# ----------------------------------------------------------------------------------------------
# What is read: numbered lines of text


def text_lines(path: Path) -> list[tuple[int, str]]:
    return list(enumerate(path.read_text(encoding="utf-8").splitlines(), 1))


def python_notes(path: Path) -> list[tuple[int, str]]:
    """The comments and docstrings of a Python file, as numbered lines."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    notes = [
        (t.start[0], t.string)
        for t in tokenize.generate_tokens(io.StringIO(source).readline)
        if t.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if (
            not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            or not body
        ):
            continue
        first = body[0]
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            notes += [(n, lines[n - 1]) for n in range(first.lineno, first.end_lineno + 1)]
    return notes


def shipped_texts() -> dict[str, tuple[list[tuple[int, str]], bool]]:
    """Every place checked, by path relative to the root: its numbered lines, and whether its
    references are checked too (False: committed report data, checked for machine paths only)."""
    found: dict[str, tuple[list[tuple[int, str]], bool]] = {
        "README.md": (text_lines(ROOT / "README.md"), True),
        "Makefile": (text_lines(ROOT / "Makefile"), True),
    }
    for folder in ("docs", "conf"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in TEXT_SUFFIXES:
                name = path.relative_to(ROOT).as_posix()
                if path.suffix == ".py":
                    found[name] = (python_notes(path), True)
                else:
                    found[name] = (text_lines(path), path.suffix in {".md", ".yaml", ".yml", ".j2"})
    for folder in CODE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found[path.relative_to(ROOT).as_posix()] = (python_notes(path), True)
    return found


# ----------------------------------------------------------------------------------------------
# Files


def expanded(reference: str) -> list[str]:
    """``{a,b}`` lists spelled out: ``x.{a,b}`` is ``x.a`` and ``x.b``."""
    parts = re.split(r"(\{[^{}]*\})", reference)
    choices = [p[1:-1].replace(" ", "").split(",") if p.startswith("{") else [p] for p in parts]
    return ["".join(c) for c in itertools.product(*choices)]


def file_exists(reference: str) -> bool:
    """Whether a path under the root exists; ``<name>``, ``*`` and ``...`` match any part of a name."""
    pattern = re.sub(r"<[^<>]*>|\.\.\.", "*", reference).rstrip("/")
    if "*" in pattern:
        return next(ROOT.glob(pattern), None) is not None
    return (ROOT / pattern).exists()


def elsewhere(reference: str) -> bool:
    return any(fnmatch.fnmatchcase(reference, pattern) for pattern in ELSEWHERE)


def file_references(line: str) -> list[str]:
    return [m.group(0).rstrip(".,-+") for m in FILE_REF.finditer(line)]


# ----------------------------------------------------------------------------------------------
# Modules and their top-level names


def module_path(name: str) -> Path | None:
    """The file (or, for a folder without ``__init__.py``, the folder) of module ``name``, or None."""
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return base if base.is_dir() and name in PACKAGES else None


@cache
def top_level_names(path: Path) -> frozenset[str]:
    """What a module defines at its top level: functions, classes, assigned and imported names,
    ``__all__``, and, for a module with a lazy ``__getattr__``, the string keys of its top-level dicts."""
    if path.is_dir():
        return frozenset()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    lazy: set[str] = set()
    statements = list(tree.body)
    while statements:
        node = statements.pop()
        if isinstance(node, ast.If | ast.Try):
            statements += [*node.body, *node.orelse, *getattr(node, "finalbody", [])]
            statements += [s for h in getattr(node, "handlers", []) for s in h.body]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if node.value is not None:
                lazy |= {
                    c.value
                    for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                }
    return frozenset(names | lazy) if "__getattr__" in names else frozenset(names)


def module_problem(reference: str) -> str | None:
    """Why a dotted name names nothing here, or None when it does."""
    parts = reference.split(".")
    if parts[-1] in FILE_SUFFIXES:
        return None  # a file's name (`bench.md`), not a module
    for end in range(len(parts), 0, -1):
        path = module_path(".".join(parts[:end]))
        if path is None:
            continue
        if end == len(parts) or parts[end] in top_level_names(path):
            return None
        return f"no module {'.'.join(parts[: end + 1])}, nor a name {parts[end]} in {'.'.join(parts[:end])}"
    return f"no module {parts[0]}"


def dotted_references(line: str) -> list[str]:
    return [name for m in DOTTED_REF.finditer(line) for name in expanded(m.group(0))]


# ----------------------------------------------------------------------------------------------
# The checks


def machine_paths(texts: dict[str, tuple[list[tuple[int, str]], bool]]) -> list[str]:
    return [
        f"{name}:{n}: {m.group(0)}"
        for name, (lines, _) in texts.items()
        for n, line in lines
        for m in MACHINE_PATH.finditer(line)
    ]


def missing_references(texts: dict[str, tuple[list[tuple[int, str]], bool]]) -> list[str]:
    found = []
    for name, (lines, checked) in texts.items():
        for n, line in lines if checked else []:
            for ref in file_references(line):
                if not elsewhere(ref) and not any(file_exists(r) for r in expanded(ref)):
                    found.append(f"{name}:{n}: {ref} (no such file)")
            for ref in dotted_references(line):
                problem = None if elsewhere(ref) else module_problem(ref)
                if problem:
                    found.append(f"{name}:{n}: {ref} ({problem})")
    return found


def test_nothing_shipped_names_a_path_of_one_machine():
    found = machine_paths(shipped_texts())
    assert not found, "machine paths (record them relative to the repository):\n" + "\n".join(found)


def test_every_file_and_module_named_exists():
    found = missing_references(shipped_texts())
    assert not found, "references to nothing in this repository:\n" + "\n".join(found)


def test_the_checks_find_what_they_should_and_nothing_else():
    """Each check can fail, on the cases it exists for, and stays quiet on what only looks alike."""
    page = [
        (1, "see pipeline/attention.py and pipeline/models/attention.py; `python -m pipeline.no_such_cli`"),
        (2, "pipeline.api.score, pipeline.api.no_such_name, docs/bench.md, bench.md, conf/model/"),
        (3, "https://github.com/org/repo/blob/main/docs/x.md, LooGLE's Prediction/pred_opensource_models.py"),
        (4, "conf/refresh/official-<evaluator>.yaml, docs/reports/{cost,memory}.md, tests/..."),
        (5, "pipeline.reporting.{ladder,ladder_plot}; results=/tmp/x, ~/.cache/longppl, $WORK/model"),
        (6, 'C:\\Users\\me, "/root/.cache/x", /work/main/x, /proc/self, hf://datasets/org/name'),
    ]
    texts = {"page.md": (page, True)}
    assert missing_references(texts) == [
        "page.md:1: pipeline/attention.py (no such file)",
        "page.md:1: pipeline.no_such_cli (no module pipeline.no_such_cli, nor a name no_such_cli in "
        "pipeline)",
        "page.md:2: pipeline.api.no_such_name (no module pipeline.api.no_such_name, nor a name "
        "no_such_name in pipeline.api)",
        "page.md:5: pipeline.reporting.ladder_plot (no module pipeline.reporting.ladder_plot, nor a name "
        "ladder_plot in pipeline.reporting)",
    ]
    assert machine_paths(texts) == [
        "page.md:5: /tmp/",
        "page.md:6: C:\\U",
        "page.md:6: /root/",
        "page.md:6: /work/",
    ]
    assert missing_references({"data.json": (page, False)}) == []  # report data: machine paths only


def test_lazy_names_and_records_kept_relative(tmp_path, monkeypatch):
    """``pipeline.score_model`` is a lazy name of the package (read statically); a record keeps a path
    under the working directory relative to it, under the home folder as ``~/``, elsewhere as given:
    a model's folder and an artifact's source, as results lines and manifests record them."""
    from pipeline.files import recorded_path

    assert module_problem("pipeline.score_model") is None
    assert module_problem("pipeline.lmeval.schema_problems") is None
    work, home = tmp_path / "repo", tmp_path / "home"
    (work / "artifacts").mkdir(parents=True)
    home.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(home))
    assert recorded_path(work / "artifacts" / "x.png") == "artifacts/x.png"
    assert recorded_path("artifacts/x.png") == "artifacts/x.png"
    assert recorded_path(home / ".cache" / "m.gguf") == "~/.cache/m.gguf"
    assert recorded_path(tmp_path / "elsewhere") == str(tmp_path / "elsewhere")

    from pipeline.artifact.reader import locate_artifact
    from pipeline.models.sources import ModelSource

    (work / "models" / "mine").mkdir(parents=True)
    local = ModelSource(spec="models/mine", kind="local", path=str(work / "models" / "mine"))
    assert local.to_dict()["path"] == "models/mine"
    assert ModelSource(spec="org/name", kind="hub", path="org/name").to_dict()["path"] == "org/name"
    assert locate_artifact(str(work / "artifacts")) == (work / "artifacts", {"path": "artifacts"})
