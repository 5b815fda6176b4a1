"""`make validate`'s settings as types: its own options (``conf/validate.yaml``) and everything the
study reads, typed at the command's door (``studies.validate``)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import pydantic.dataclasses
from pydantic import AfterValidator

from pipeline.definition import KeyTokenDefinition, Positive
from pipeline.jobs.keytokens import KeyTokensJob
from pipeline.models.loading import ModelChoice
from pipeline.settings import Compute, NonNegative
from pipeline.text.corpus import distinct_tasks


@pydantic.dataclasses.dataclass(frozen=True, config=pydantic.ConfigDict(extra="forbid"))
class LoogleTargetOptions:
    """``conf/validate.yaml``'s ``loogle``: the second target (``studies.validation.loogle_target``)."""

    enabled: bool = True
    artifact: str | None = None  # a key-token artifact with questions; None: built with the settings below
    data: str = (
        "auto"  # auto: LooGLE's test data in ../shared/data/loogle when there, else sample; or a folder
    )
    evaluator: str = "gemma3-270m"
    preset: str = "cpu"
    max_tokens: Positive | None = 32767
    tasks: Annotated[list[str], AfterValidator(distinct_tasks)] = dataclasses.field(
        default_factory=lambda: ["longdep_qa"]
    )
    count: Literal["all", "some"] = "all"  # a question counts with all (or some) of its evidence located
    min_questions: Positive = 5  # a member counts with at least this many counted questions
    resamples: Positive = 2000  # the paired bootstrap over documents (each with all its questions)
    seed: NonNegative = 0
    only: bool = False  # recompute this target alone, into the previous run's results.json and report


@pydantic.dataclasses.dataclass(frozen=True)
class ValidateOptions:
    """``conf/validate.yaml``'s own settings (the definition, the grid, the compute settings and the
    evaluator group are checked as their own types)."""

    seed: NonNegative
    documents: Positive
    lines: Positive
    questions: Positive
    min_gap_lines: NonNegative
    members: list[dict[str, Any]]
    govreport: str
    govreport_documents: Positive
    evaluators: list[dict[str, Any]]
    work_dir: str
    docs_dir: str
    report: str
    checkpoints: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    fresh: bool = True
    loogle: LoogleTargetOptions = dataclasses.field(default_factory=LoogleTargetOptions)


@dataclass(frozen=True)
class ValidateSettings:
    """Everything the study reads, typed at the command's door. The stages it runs are composed by
    the command too: ``keytokens_for`` and ``model_for`` take overrides of ``conf/keytokens.yaml`` and
    ``conf/score.yaml`` and give that stage's typed settings or model."""

    options: ValidateOptions
    definition: KeyTokenDefinition
    compute: Compute
    grid: list[tuple[float, float]]
    evaluator: ModelChoice
    progress: bool
    keytokens_for: Callable[[list[str]], KeyTokensJob]
    model_for: Callable[[list[str]], ModelChoice]

    def overrides(self, keys: Iterable[str]) -> list[str]:
        """These settings of the study (definition, compute, progress) as a stage's ``key=value``."""
        values = dataclasses.asdict(self.definition) | dataclasses.asdict(self.compute)
        values["progress"] = self.progress
        return [f"{key}={json.dumps(values[key])}" for key in keys]
