"""The command line itself, in every command: a mistyped key, an unknown group option or preset and an
override that does not parse are one ``error:`` line with exit status 2 naming the setting and the known
ones (on 70baafc: Hydra's message, exit status 1 and its HYDRA_FULL_ERROR hint); Ctrl-C is one
``error:`` line with exit status 2, and a results line it cuts is taken back (on 70baafc: a
traceback); `make loogle-keytokens`' numbers are typed, refused before any work. A flag no command
knows, a nested key that is no setting, Ctrl-C while ``python -m`` imports a command, ``longppl``'s
unknown subcommand with control characters and help read by a program that stops reading (on 803d062:
argparse's usage block, "(known: )", a KeyboardInterrupt traceback with status 130, the characters
raw, a BrokenPipeError traceback)."""

from __future__ import annotations

import importlib
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

from pipeline import cli
from pipeline.errors import CLOSED_PIPE, INTERRUPTED, STOPPED
from pipeline.results.score import read_lines
from tests.support import ROOT, score

COMMANDS = {
    name: module for name, module in cli.commands().items() if name not in ("lm-eval", "setup-loogle")
}


def ran(capsys, module: str, monkeypatch, *argv: str) -> tuple[int, list[str], str]:
    """Run a command's ``main()`` in this process with ``argv``: its exit status, its ``error:`` lines
    and its whole stderr."""
    monkeypatch.setattr(sys, "argv", [module, *argv])
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(SystemExit) as stopped:
        importlib.import_module(module).main()
    err = capsys.readouterr().err
    return stopped.value.code, [line for line in err.splitlines() if line.startswith("error: ")], err


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_refuses_a_mistyped_key_in_one_line(name, capsys, monkeypatch, tmp_path):
    code, errors, err = ran(
        capsys, COMMANDS[name], monkeypatch, "contex_limit=4", f"hydra.run.dir={tmp_path}"
    )
    assert code == 2 and len(errors) == 1, err
    assert errors[0].startswith("error: setting contex_limit=4: no such setting") and "(known: " in errors[0]
    assert "HYDRA_FULL_ERROR" not in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("name", "given", "said"),
    [
        ("score", "contex_limit=4", r"no such setting, did you mean context_limit\? \(known: add_bos, "),
        ("score", "model=nope", r"no such model \(known: gemma3-270m, local, smollm2-135m\)$"),
        ("score", "model.spek=x", r"no such setting, did you mean spec\? \(known: attn_implementation, "),
        ("score", "preset=nope", r"no such setting \(known: add_bos, "),
        ("keytokens", "preset=pape", r"no such preset, did you mean paper\? \(known: cpu, long, paper\)$"),
        ("keytokens", "evaluator=nope", r"no such evaluator \(known: gemma3-270m, "),
        ("forgetting-curve", "preset=nope", r"no such preset \(known: cpu, long, paper\)$"),
        ("score", "hydra/launcher=nope", r"no such hydra/launcher \(known: basic, joblib, slurm, "),
        ("score", "a=[1", r"not a key=value override \(no viable alternative at input '\[1'\)$"),
        (
            "leaderboard",
            "~results",
            r"the command reads results; give it a value instead \(results=\.\.\.\)$",
        ),
    ],
)
def test_an_unknown_key_option_or_override_names_the_known_ones(
    name, given, said, capsys, monkeypatch, tmp_path
):
    code, errors, err = ran(capsys, COMMANDS[name], monkeypatch, given, f"hydra.run.dir={tmp_path}")
    assert code == 2 and len(errors) == 1, err
    assert errors[0].startswith(f"error: setting {given}: "), errors[0]
    assert re.search(said, errors[0]), errors[0]


def test_multirun_help_and_longppl_keep_their_paths(capsys, monkeypatch, tmp_path):
    sweep = f"hydra.sweep.dir={tmp_path}"
    code, errors, _ = ran(capsys, COMMANDS["score"], monkeypatch, "-m", "model=local,nope", sweep)
    assert code == 2 and errors == [
        "error: setting model=nope: no such model (known: gemma3-270m, local, smollm2-135m)"
    ]
    code, errors, _ = ran(capsys, COMMANDS["score"], monkeypatch, "-m", "contex_limit=1,2", sweep)
    assert code == 2 and errors[0].startswith(
        "error: setting contex_limit=1,2: no such setting, did you mean"
    )
    code, errors, _ = ran(capsys, COMMANDS["score"], monkeypatch, "--cfg", "job", "contex_limit=3")
    assert code == 2 and errors[0].startswith("error: setting contex_limit=3: no such setting")
    monkeypatch.setattr(sys, "argv", ["score", "--help"])
    with pytest.raises(SystemExit) as stopped:
        importlib.import_module(COMMANDS["score"]).main()
    assert stopped.value.code == 0 and "context_limit: null" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stopped:
        cli.main(["score", "contex_limit=4"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.startswith("error: setting contex_limit=4: no such setting, did you mean")


@pytest.mark.parametrize("name", [*COMMANDS, "lm-eval", "setup-loogle"])
def test_ctrl_c_in_every_command_is_one_line_and_status_2(name, capsys, monkeypatch, tmp_path):
    """The command's work interrupted (what Ctrl-C raises in Python): no traceback."""
    module = importlib.import_module(cli.commands()[name])

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    target = {"lm-eval": "run", "setup-loogle": "install"}.get(name, "run")
    monkeypatch.setattr(module, target, interrupted)
    argv = [] if name in ("lm-eval", "setup-loogle") else [f"hydra.run.dir={tmp_path}"]
    code, errors, err = ran(capsys, module.__name__, monkeypatch, *argv)
    assert code == INTERRUPTED and errors == [
        "error: interrupted (Ctrl-C): the command stopped; the files it wrote so far are whole (run it again "
        "to finish)"
    ], err
    assert "Traceback" not in err


# `longppl score`, its results line interrupted by SIGINT (what the terminal sends on Ctrl-C) halfway
# through its write.
INTERRUPTED_WRITE = textwrap.dedent(
    """
    import os, signal, sys
    from pipeline.results import lines
    real_write_all = lines.write_all

    def half_then_ctrl_c(fd, data):
        real_write_all(fd, data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGINT)
        real_write_all(fd, data[len(data) // 2 :])

    lines.write_all = half_then_ctrl_c
    from pipeline.cli import main
    main(sys.argv[1:])
    """
)


def test_ctrl_c_midway_through_a_results_line_leaves_the_file_whole(other_model_dir, tiny_artifact, tmp_path):
    results = tmp_path / "scores.jsonl"
    score(other_model_dir, tiny_artifact, tmp_path)
    before = results.read_bytes()
    args = [
        "score",
        "model=local",
        f"model.spec={other_model_dir}",
        f"artifact={tiny_artifact}",
        f"results={results}",
    ]
    args += ["dtype=float64", "device=cpu", "progress=false", f"hydra.run.dir={tmp_path / 'logs'}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_WRITE, *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=600, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )  # fmt: skip
    assert done.returncode == INTERRUPTED and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert [line for line in done.stderr.splitlines() if line.startswith("error")] == [
        "error: interrupted (Ctrl-C): the command stopped; the files it wrote so far are whole (run it again "
        "to finish)"
    ]
    assert results.read_bytes() == before and [n for n, _, _ in read_lines(results)] == [1]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("shifts=abc", "error: setting shifts='abc': Input should be a valid integer"),
        ("shifts=10^12", "error: setting shifts=10^12: not a key=value override"),
        (
            "shifts=1000000000000",
            "error: setting shifts=1000000000000: Input should be less than or equal to",
        ),
        ("seed=-1", "error: setting seed=-1: Input should be greater than or equal to 0"),
        ("first_window=maybe", "error: setting first_window='maybe': Input should be a valid boolean"),
    ],
)
def test_loogle_keytokens_numbers_are_typed_before_any_work(given, said, capsys, monkeypatch, tmp_path):
    """The artifact does not exist: a command that got past its settings would fail on it instead (on
    70baafc: int('abc') and default_rng(-1) tracebacks; first_window=maybe read as true)."""
    argv = [f"artifact={tmp_path / 'none'}", given, f"hydra.run.dir={tmp_path}"]
    code, errors, err = ran(capsys, COMMANDS["loogle-keytokens"], monkeypatch, *argv)
    assert code == 2 and len(errors) == 1 and errors[0].startswith(said), err


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_refuses_a_flag_it_does_not_know_in_one_line(name, capsys, monkeypatch, tmp_path):
    code, errors, err = ran(capsys, COMMANDS[name], monkeypatch, "--nosuch", f"hydra.run.dir={tmp_path}")
    assert code == 2 and err.splitlines() == errors, err
    assert errors == [
        f"error: longppl {name}: unrecognized arguments: --nosuch (settings are key=value overrides: "
        f"longppl {name} --help lists them, --hydra-help Hydra's flags)"
    ]


def test_hydras_own_flags_lm_eval_and_setup_loogle_refuse_in_one_line(capsys, monkeypatch):
    code, errors, err = ran(capsys, COMMANDS["score"], monkeypatch, "--cfg", "nope")
    assert code == 2 and err.splitlines() == errors, err
    assert errors[0].startswith("error: longppl score: argument --cfg/-c: invalid choice: 'nope'")
    setup = importlib.import_module(cli.commands()["setup-loogle"])
    monkeypatch.setattr(setup, "install", lambda folder: pytest.fail("installed despite its arguments"))
    for given in ("--nosuch", "x=1"):
        code, errors, err = ran(capsys, setup.__name__, monkeypatch, given)
        assert code == 2 and err.splitlines() == errors == [
            f"error: longppl setup-loogle: unrecognized arguments: {given} (longppl setup-loogle --help "
            "lists its arguments)"
        ], err
    pytest.importorskip("lm_eval")
    code, errors, err = ran(capsys, cli.commands()["lm-eval"], monkeypatch, "--nosuch")
    assert code == 2 and [line for line in err.splitlines() if "--nosuch" in line] == errors == [
        "error: longppl lm-eval: unrecognized arguments: --nosuch (longppl lm-eval run --help lists "
        "lm-eval's flags)"
    ], err


@pytest.mark.parametrize(
    ("name", "given", "said"),
    [
        ("score", "nosuch.x=1", r"no such group nosuch \(known: add_bos, allow_truncation, artifact, "),
        ("score", "modl.spec=x", r"no such group modl, did you mean model\? \(known: add_bos, "),
        ("score", "results.x=1", r"results is a setting of its own, not a group of settings: give results="),
        ("score", "model.device_map.x=1", r"model\.device_map is a setting of its own, not a group"),
        ("score", "hydra.nosuch=1", r"no such setting \(known: callbacks, env, help, hydra_help, "),
        ("keytokens", "evaluator.x.y=1", r"no such group evaluator\.x \(known: attn_implementation, "),
    ],
)
def test_a_nested_key_names_its_groups_keys(name, given, said, capsys, monkeypatch, tmp_path):
    code, errors, err = ran(capsys, COMMANDS[name], monkeypatch, given, f"hydra.run.dir={tmp_path}")
    assert code == 2 and len(errors) == 1, err
    assert errors[0].startswith(f"error: setting {given}: ") and re.search(said, errors[0]), errors[0]
    assert "(known: )" not in errors[0]


def test_longppl_escapes_an_unknown_commands_control_characters(capsys):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["sco\x1b]52;c;aGk=\x07re\u202e"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "\x1b" not in err and "\x07" not in err and "\u202e" not in err
    assert err.startswith("error: unknown command 'sco\\x1b]52;c;aGk=\\x07re\\u202e' (known: ")


@pytest.mark.parametrize("argv", [["--help"], ["score", "--help"]])
def test_help_read_by_a_program_that_stops_reading_ends_quietly(argv, capsys, monkeypatch, tmp_path):
    """`longppl score --help | head`: the reader gone before the help is written."""
    read, write = os.pipe()
    os.close(read)
    stdout = open(write, "w")  # noqa: SIM115  (closed below, whatever happens)
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "argv", ["longppl", *argv, f"hydra.run.dir={tmp_path}"])
    try:
        with pytest.raises(SystemExit) as stopped:
            cli.main(argv)
    finally:
        monkeypatch.undo()
        stdout.close()
    assert stopped.value.code == CLOSED_PIPE and capsys.readouterr().err == ""


def test_ctrl_c_while_python_m_imports_a_command_is_one_line(tmp_path):
    """SIGINT once torch is imported, while the command module's own imports go on (each import's line
    comes from ``-X importtime`` as it ends)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-X", "importtime", "-m", "pipeline.commands.score", f"hydra.run.dir={tmp_path}"]
    process = subprocess.Popen(
        argv, cwd=ROOT, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )  # fmt: skip
    for line in process.stderr:
        if line.split("|")[-1].strip() == "torch":
            process.send_signal(signal.SIGINT)
            break
    rest = process.stderr.read()
    assert process.wait(timeout=600) == INTERRUPTED, rest[-3000:]
    said = [line for line in rest.splitlines() if not line.startswith("import time:")]
    assert said == [STOPPED], rest[-3000:]
