"""The score job (`make score`, ``pipeline.api.score``): one causal LM against a key-token artifact, its
line appended to the results file (``scores.jsonl``). Needs no corpus and no evaluator: the texts,
spans and LSD come from the artifact."""

from __future__ import annotations

import numbers
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.jobs.recipe import ArtifactInput, JobResult, ModelInput, Record, TypedJob
from pipeline.models.loading import LoadedModel, ModelChoice
from pipeline.models.logprobs import TargetScorer
from pipeline.results import score as score_lines
from pipeline.results.keys import context_name
from pipeline.score.engine import score
from pipeline.settings import Compute, ScoreSettings, flag, parse, parse_group

Documents = int | Sequence[str] | None  # all, the first N, or these ids
KeyTokens = str | Path | KeyTokenArtifact  # a directory, hf://datasets/<org>/<name>@<rev>, or in memory


@dataclass(frozen=True)
class ScoreJob(TypedJob, ArtifactInput):
    """`make score`'s settings, typed: the model, the artifact, the score and compute settings, where
    the line goes (None: nowhere), which documents, and whether to show progress."""

    model: ModelInput
    artifact: KeyTokens
    settings: ScoreSettings = field(default_factory=ScoreSettings)
    compute: Compute = field(default_factory=Compute)
    results: Path | None = None
    documents: Documents = None  # a run on part of the artifact records the ids (no leaderboard entry)
    progress: bool = False
    results_setting: str = "results"  # the API calls it results_file

    def __post_init__(self) -> None:
        object.__setattr__(self, "documents", checked_documents(self.documents))
        super().__post_init__()

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> ScoreJob:
        """``conf/score.yaml`` as plain data (a command's config, overrides applied), typed and checked."""
        return cls(
            model=parse_group(ModelChoice, values, "model"),
            artifact=str(values["artifact"]),
            settings=parse(ScoreSettings, values),
            compute=parse(Compute, values),
            results=Path(str(values["results"])),
            progress=flag(values["progress"], "progress"),
        )

    results_kind = score_lines.KIND
    append = staticmethod(score_lines.append)

    def measure(
        self,
        lm: LoadedModel,
        scorer: TargetScorer,
        artifact: KeyTokenArtifact,
        record: Record,
        started: float,
    ) -> JobResult:
        """The score call, then its line (the name with one ``@ctx<N>``, the context limit used)."""
        scored = score(artifact, lm, self.settings, scorer, documents=self.documents, progress=self.progress)
        name = context_name(self.model.display_name, self.settings.context_limit)
        record(score_lines.score_row(name, lm, scored, time.time() - started))
        return JobResult(scored, warnings=scored.warnings)


def checked_documents(documents: Any) -> int | list[str] | None:
    """None (all), a positive number (the first N), or a list of document ids (str): ``documents=0``
    (or ``[]``) would score none and ``documents=-2`` all but the last two, so each is refused."""
    if documents is None:
        return None
    if isinstance(documents, numbers.Integral) and not isinstance(documents, bool | np.bool_):
        if documents < 1:
            raise PipelineError(f"documents={documents}: give a positive number, a list of ids, or None")
        return int(documents)
    ids = None if isinstance(documents, str | bytes | bool) else documents
    if not isinstance(ids, Sequence | set | frozenset) or not ids or not all(isinstance(d, str) for d in ids):
        raise PipelineError(
            f"documents={documents!r}: give a positive number, a list of document ids (str), or None"
        )
    return list(ids)
