"""`make validate`: ``python -m studies.validate [key=value ...]`` (Hydra overrides of
``conf/validate.yaml``): every setting typed and checked before anything runs (one error line for the
first bad one), then the study (``studies.validation.claims``). The stages it runs are composed here,
from ``conf/keytokens.yaml`` and ``conf/score.yaml``, and handed to it typed."""

from __future__ import annotations

from typing import Any

from pipeline.commands.shell import compose, hydra_main, plain
from pipeline.definition import KeyTokenDefinition
from pipeline.jobs.keytokens import KeyTokensJob
from pipeline.models.loading import ModelChoice
from pipeline.settings import Compute, ScoreSettings, parse
from studies.validation.claims import run as validate
from studies.validation.options import ValidateOptions, ValidateSettings


def settings(values: dict[str, Any]) -> ValidateSettings:
    """The study's settings from its config as plain data."""
    return ValidateSettings(
        options=parse(ValidateOptions, values),
        definition=parse(KeyTokenDefinition, values),
        compute=parse(Compute, values),
        grid=list(parse(ScoreSettings, {"grid": values["grid"]}).grid),
        evaluator=ModelChoice.parse(values["evaluator"], "evaluator."),
        progress=bool(values["progress"]),
        keytokens_for=lambda overrides: KeyTokensJob.from_config(plain(compose("keytokens", overrides))),
        model_for=lambda overrides: ModelChoice.parse(plain(compose("score", overrides))["model"]),
    )


def run(cfg: Any) -> dict[str, Any]:
    return validate(settings(plain(cfg)))


def main() -> None:
    hydra_main("validate", run)


if __name__ == "__main__":
    main()
