"""CI runs what a new user runs: the README's two commands on a fresh machine, in its order."""

from __future__ import annotations

import re

from tests.support import ROOT


def readme_commands() -> list[str]:
    """The commands of the README's first shell block after "Two commands on a fresh machine"."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Two commands on a fresh machine") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]


def test_ci_runs_the_readme_two_commands_in_order():
    commands = readme_commands()
    assert commands == ["make keytokens", "make test"], commands
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    steps = [line.strip().removeprefix("time ").strip() for line in script.splitlines()]
    run = [step for step in steps if step.startswith("make ")]
    assert run == commands, run
