"""How straight a command's run is: its settings followed through the calls that pass them on; the
tests hold `make score`'s, `make keytokens`'s and `make loogle`'s walks within ``LIMITS``.

    python -m tests.project.test_walks score keytokens loogle   # --show: the calls; --values: stricter

The command runs on tiny random-weight models (built here, in a temporary folder) under a profiler.
A call *passes the settings on* when one of its arguments, other than ``self``, is a settings object:
the command's Hydra config, its plain form (and the mappings and lists in it), what ``parse`` or a
``from_config`` makes of them (typed settings, a job), the settings objects those hold, and any object
of a settings type the command parsed (``replace(settings, context_limit=w)``: the settings at one
limit). A value taken out of the settings (a model's spec, a path, a number) is not the settings: a
function that gets one uses a value, and is not handed the settings. The *walk* is the modules of
those calls' functions in call order, repeats in a row merged. Counted on it:

- ``modules``: the distinct modules it enters;
- ``climbs``: the steps to a module of a higher layer than the step before (``tests.support``'s layers);
- ``returns``: the steps to a module it had already left; ``most returns``: the largest count of them
  for one module.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT

PIPELINE = str(ROOT / "pipeline")
LIMITS = {"modules": 12, "climbs": 3, "most returns": 2}


def module_of(filename: str) -> str | None:
    if not filename.startswith(PIPELINE):
        return None
    return ".".join(Path(filename).relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def is_settings_object(value: Any) -> bool:
    """A typed settings object: a pydantic dataclass instance (how the project types settings)."""
    from pydantic.dataclasses import is_pydantic_dataclass

    return is_pydantic_dataclass(type(value)) and not isinstance(value, type)


class Walk:
    """The walk of one run (``trace``): the modules of the calls that pass the settings on."""

    def __init__(self, values: bool = False) -> None:
        self.values = values  # also follow the values taken out of the settings (--values: stricter)
        self.tracked: dict[int, Any] = {}  # id -> object (kept alive, so ids stay unique)
        self.types: set[type] = set()  # the settings types tracked
        self.steps: list[str] = []
        self.calls: list[str] = []  # every settings-passing call, module.function (``--show``)

    def track(self, value: Any) -> None:
        """A settings object, and the settings inside it: the mappings and lists of a mapping or list,
        the typed settings held by a job or settings type (with ``values``: also its text of more than 8
        characters, paths and tuples)."""
        if id(value) in self.tracked or value is None or isinstance(value, (bool, int, float)):
            return
        if isinstance(value, (str, bytes, Path, tuple)) and not (self.values and len(str(value)) > 8):
            return
        self.tracked[id(value)] = value
        if is_settings_object(value):
            self.types.add(type(value))
        if isinstance(value, dict):
            children = list(value.values())
        elif isinstance(value, list):
            children = value
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            children = [getattr(value, f.name) for f in dataclasses.fields(value)]
        else:
            children = []
        for item in children:
            if isinstance(item, (dict, list)) or is_settings_object(item) or self.values:
                self.track(item)

    def passes_settings(self, frame: Any) -> bool:
        code = frame.f_code
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        found = False
        for i, name in enumerate(names):
            value = frame.f_locals.get(name)
            if i == 0 and name in ("self", "cls"):
                continue
            if is_settings_object(value) and type(value) in self.types:
                self.track(value)  # the settings at one limit, say: of a type the command parsed
            if id(value) in self.tracked:
                found = True
        return found

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "return" and frame.f_code.co_name in ("plain", "parse", "from_config", "to_container"):
            if module_of(frame.f_code.co_filename) or frame.f_code.co_name == "to_container":
                self.track(arg)
            return
        if event != "call":
            return
        module = module_of(frame.f_code.co_filename)
        if module is None or frame.f_code.co_name.startswith("<"):
            return
        if not self.passes_settings(frame):
            return
        self.calls.append(f"{module}.{frame.f_code.co_name}")
        if not self.steps or self.steps[-1] != module:
            self.steps.append(module)

    @contextmanager
    def trace(self, cfg: Any) -> Iterator[None]:
        self.track(cfg)
        previous = sys.getprofile()
        sys.setprofile(self.profile)
        try:
            yield
        finally:
            sys.setprofile(previous)

    def counts(self, rank: Callable[[str], int]) -> dict[str, Any]:
        seen: set[str] = set()
        returns: Counter[str] = Counter()
        climbs = 0
        for before, step in zip([None, *self.steps], self.steps, strict=False):
            if before is not None and rank(step) > rank(before):
                climbs += 1
            if step in seen:
                returns[step] += 1
            seen.add(step)
        return {
            "modules": len(seen),
            "climbs": climbs,
            "returns": sum(returns.values()),
            "most returns": max(returns.values(), default=0),
            "most returned to": returns.most_common(1)[0][0] if returns else None,
        }


# ----------------------------------------------------------------------------------------------
# The runs, on tiny models


def tiny_inputs(folder: Path) -> dict[str, Path]:
    """A tiny evaluator and model (saved checkpoints), a corpus of three texts, a LooGLE folder."""
    from tests.support import STAGE1_TEXTS, build_tokenizer, loogle_folder, save_tiny_model

    corpus = folder / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": f"doc-{i}", "text": t}) + "\n" for i, t in enumerate(STAGE1_TEXTS))
    )
    return {
        "evaluator": save_tiny_model(folder / "evaluator", build_tokenizer()),
        "model": save_tiny_model(folder / "model", build_tokenizer(300), seed=1),
        "corpus": corpus,
        "loogle": loogle_folder(folder / "loogle"),
        "out": folder,
    }


def keytokens_cfg(inputs: dict[str, Path]) -> Any:
    from tests.support import compose_keytokens, keytokens_overrides

    return compose_keytokens(keytokens_overrides(inputs["evaluator"], inputs["corpus"], inputs["out"]))


def command_cfg(command: str, inputs: dict[str, Path]) -> Any:
    from tests.support import compose_config

    out = inputs["out"]
    common = [f"model.spec={inputs['model']}", "dtype=float64", "device=cpu", "progress=false"]
    if command == "score":
        return compose_config("score", [*common, f"artifact={out / 'test'}", f"results={out / 's.jsonl'}"])
    if command == "loogle":
        return compose_config("loogle", [
            *common, f"data={inputs['loogle']}", "task=shortdep_qa", "max_new_tokens=4", "max_length=200",
            f"predictions_dir={out / 'predictions'}", f"results={out / 'l.jsonl'}", "bertscore=false",
        ])  # fmt: skip
    raise SystemExit(f"no walk for {command}: use keytokens, score or loogle")


def walk(command: str, values: bool = False) -> Walk:
    """The walk of one command's run on tiny inputs."""
    import importlib

    from tests.support import run_keytokens

    with tempfile.TemporaryDirectory() as tmp:
        inputs = tiny_inputs(Path(tmp))
        cfg = keytokens_cfg(inputs)
        if command == "keytokens":
            found = Walk(values)
            with found.trace(cfg):
                run_keytokens(cfg)
            return found
        run_keytokens(cfg)
        cfg = command_cfg(command, inputs)
        run = importlib.import_module(f"pipeline.commands.{command}").run
        found = Walk(values)
        with found.trace(cfg):
            run(cfg)
        return found


def main() -> None:
    from tests.support import rank

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("commands", nargs="+")
    parser.add_argument("--show", action="store_true", help="print the calls of the walk, one a line")
    parser.add_argument("--values", action="store_true", help="also follow values taken out of the settings")
    args = parser.parse_args()
    for command in args.commands:
        found = walk(command, args.values)
        counts = found.counts(rank)
        print(f"{command}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        if args.show:
            print("\n".join(f"  {call}" for call in found.calls))


@pytest.mark.parametrize("command", ["score", "keytokens", "loogle"])
def test_a_run_is_a_straight_walk(command):
    """Few modules, few climbs back to a higher layer, never back to a module more than twice."""
    from tests.support import rank

    counts = walk(command).counts(rank)
    assert (counts["modules"], counts["climbs"], counts["most returns"]) <= (
        LIMITS["modules"],
        LIMITS["climbs"],
        LIMITS["most returns"],
    ) and all(counts[k] <= v for k, v in LIMITS.items()), counts


def test_the_count_sees_a_bounce():
    """A walk that goes down and back up is counted as such: the counts can fail."""
    found = Walk()
    engine, settings = "pipeline.score.engine", "pipeline.settings"
    found.steps = ["pipeline.commands.score", settings, engine, settings, engine, settings]
    from tests.support import rank

    counts = found.counts(rank)
    assert counts == {
        "modules": 3,
        "climbs": 2,
        "returns": 3,
        "most returns": 2,
        "most returned to": "pipeline.settings",
    }


if __name__ == "__main__":
    main()
