"""`make longce-demo`: ``python -m studies.longce_demo [key=value ...]`` (Hydra overrides of
``conf/longce_demo.yaml``): CE against LongCE on SmolLM2-135M, on the CPU
(``studies.longce.experiment``)."""

from __future__ import annotations

from typing import Any

from pipeline.commands.shell import compose, hydra_main, plain
from pipeline.definition import KeyTokenDefinition
from pipeline.models.loading import ModelChoice
from pipeline.settings import Compute, parse
from studies.longce.experiment import SETTINGS, DemoOptions, DemoSettings, run_demo


def recorded(values: dict[str, Any]) -> dict[str, Any]:
    """The settings results.json records: a model group by its spec."""
    return {k: values[k]["spec"] if isinstance(values[k], dict) else values[k] for k in SETTINGS}


def run(cfg: Any) -> dict[str, Any]:
    """Every setting typed and checked before anything runs, then the experiment."""
    values, defaults = plain(cfg), recorded(plain(compose("longce_demo")))
    settings = DemoSettings(
        options=parse(DemoOptions, values),
        model=ModelChoice.parse(values["model"]),
        definition=parse(KeyTokenDefinition, values),
        compute=parse(Compute, values),
        progress=bool(values["progress"]),
        recorded=recorded(values),
        changed={k: v for k, v in recorded(values).items() if v != defaults[k]},
    )
    return run_demo(settings)


def main() -> None:
    hydra_main("longce_demo", run)


if __name__ == "__main__":
    main()
