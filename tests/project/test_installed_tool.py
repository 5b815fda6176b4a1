"""The installable tool: the ``longppl`` command (``pipeline.cli``) in the checkout, and the built wheel
installed into a fresh virtual environment, run from a working directory outside the checkout. The wheel
must carry the configs and the embedded data, its ``longppl --help`` must list every command, and its
``longppl score`` must write the same results line as the checkout's own command.

The fresh environment gets the dependencies without a download: a ``.pth`` file lists this environment's
site-packages (whose own ``.pth`` files, the editable install's among them, are then not processed), so
``pipeline`` can only come from the wheel."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from pipeline.cli import commands, help_text, main, summary
from tests.support import ROOT

# What a build does not read: environments, outputs, caches, an earlier build.
NOT_BUILT = (".venv", ".git", "artifacts", "build", "*.egg-info", "__pycache__", ".*_cache", "outputs")


def run(command: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environment |= {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **env}
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=600)


def checked(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel built from this checkout installed, and this
    environment's site-packages for the dependencies."""
    tmp = tmp_path_factory.mktemp("installed")
    source, wheels, venv = tmp / "source", tmp / "wheels", tmp / "venv"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_BUILT))  # the checkout stays clean
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    checked(run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)], tmp))
    (wheel,) = wheels.glob("*.whl")
    checked(run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp))
    python = str(venv / "bin" / "python")
    checked(run([*pip, "--python", python, "install", "--no-deps", "--no-index", str(wheel)], tmp))
    site = checked(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp))
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (Path(site.strip()) / "dependencies.pth").write_text("".join(f"{p}\n" for p in ours))
    return venv


def test_help_lists_every_command_with_its_description(capsys):
    main(["--help"])
    out = capsys.readouterr().out
    modules = {p.stem for p in (ROOT / "pipeline" / "commands").glob("*.py")} - {"__init__", "shell"}
    assert set(commands()) == {m.replace("_", "-") for m in modules}
    for name, module in commands().items():
        description = summary(module)
        assert 0 < len(description) <= 90 and not description.startswith("`make"), (module, description)
        assert any(line.split() == [name, *description.split()] for line in out.splitlines()), name


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["scroe"], "error: unknown command 'scroe': did you mean 'score'? (known: compare-artifacts, "),
        (["compare_artifacts", "a=x"], "error: unknown command 'compare_artifacts': did you mean 'compare-"),
        (["--verbose"], "error: unknown command '--verbose' (known: "),
        ([], "error: give a command: longppl <command> [key=value ...] (known: compare-artifacts, "),
    ],
)
def test_a_bad_command_is_one_error_line(argv, expected, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    captured = capsys.readouterr()
    assert exit_.value.code == 2 and captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(expected) and "show" in line


# The shipped data, read through the package from wherever it is (run here and in the installed package).
READ_SHIPPED = """
from pipeline.files import conf_file, locate_input
from pipeline.loogle.data.prompts import templates
from pipeline.loogle.data.reading import DataSource, load_questions
from pipeline.official.span_files import read_span_folder
from pipeline.text.corpus import CorpusSpec, load_corpus

documents = load_corpus(CorpusSpec.parse(conf_file("corpus/govreport_sample.yaml")))
official = read_span_folder(locate_input("data/official-key-text/Meta-Llama-3.1-8B"))
found = [len(documents), len(official), len(load_questions("longdep_qa", DataSource())), sorted(templates())]
"""
WHERE = (
    "import json, pipeline; from pipeline.files import CONF_DIR, DATA_DIR\n"
    + READ_SHIPPED
    + ("print(json.dumps([pipeline.__file__, str(CONF_DIR), str(DATA_DIR), found]))")
)


def test_the_wheel_carries_the_configs_and_the_data(venv, tmp_path):
    """The package comes from the wheel (not the checkout), with conf/ and data/ as they are here, found
    from any working directory: the GovReport sample through its config's relative path, the official
    key spans, LooGLE's sample and its prompts, as the checkout reads them."""
    package, conf, data, found = json.loads(
        checked(run([str(venv / "bin" / "python"), "-c", WHERE], tmp_path))
    )
    for path in (package, conf, data):
        assert Path(path).is_relative_to(venv), path
    here: dict = {}
    exec(READ_SHIPPED, here)
    assert found == here["found"] and found[0] == 13 and found[1] == 50 and found[2] > 0
    for name, installed in (("conf", Path(conf)), ("data", Path(data))):
        assert not differing_files(filecmp.dircmp(ROOT / name, installed)), name


def differing_files(compared: filecmp.dircmp) -> list[str]:
    """The files of two folders that are not in both or differ in contents, recursively."""
    _, mismatch, errors = filecmp.cmpfiles(
        compared.left, compared.right, compared.common_files, shallow=False
    )
    found = compared.left_only + compared.right_only + mismatch + errors
    return found + [f for sub in compared.subdirs.values() for f in differing_files(sub)]


def test_installed_longppl_scores_as_the_checkout_does(venv, tiny_model_dir, tiny_artifact, tmp_path):
    longppl = str(venv / "bin" / "longppl")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert checked(run([longppl, "--help"], outside)).strip() == help_text(commands())
    done = run([longppl, "scroe"], outside)
    assert done.returncode == 2 and done.stderr.startswith(
        "error: unknown command 'scroe': did you mean 'score'?"
    )
    settings = [f"model.spec={tiny_model_dir}", f"artifact={tiny_artifact}", "dtype=float64", "device=cpu"]
    installed, checkout = tmp_path / "installed.jsonl", tmp_path / "checkout.jsonl"
    checked(run([longppl, "score", *settings, f"results={installed}"], outside))
    command = [sys.executable, "-m", "pipeline.cli", "score", *settings, f"results={checkout}"]
    checked(run(command, outside, PYTHONPATH=str(ROOT)))
    assert (outside / "artifacts" / "logs").is_dir()  # outputs stay relative to the working directory
    (mine,), (theirs,) = ([json.loads(x) for x in p.read_text().splitlines()] for p in (installed, checkout))
    assert mine["corpus"]["n_tokens"] > 0 and mine["corpus"]["ppl"] > 1
    timing = ("date", "wall_seconds")
    assert {k: v for k, v in mine.items() if k not in timing} == {
        k: v for k, v in theirs.items() if k not in timing
    }
