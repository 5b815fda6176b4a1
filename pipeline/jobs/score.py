"""The score job (`make score`, ``pipeline.api.score``): one causal LM against a key-token artifact, its
line appended to the results file (``scores.jsonl``). Needs no corpus and no evaluator: the texts,
spans and LSD come from the artifact."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.jobs.recipe import ArtifactInput, JobResult, ModelInput, Record
from pipeline.models.loading import LoadedModel, ModelChoice
from pipeline.models.logprobs import TargetScorer
from pipeline.results import score as score_lines
from pipeline.results.keys import context_name
from pipeline.score.engine import score
from pipeline.settings import Compute, ScoreSettings, parse, parse_group

Documents = int | Sequence[str] | None  # all, the first N, or these ids
KeyTokens = str | Path | KeyTokenArtifact  # a directory, hf://datasets/<org>/<name>@<rev>, or in memory


@dataclass(frozen=True)
class ScoreJob(ArtifactInput):
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

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> ScoreJob:
        """``conf/score.yaml`` as plain data (a command's config, overrides applied), typed and checked."""
        return cls(
            model=parse_group(ModelChoice, values, "model"),
            artifact=str(values["artifact"]),
            settings=parse(ScoreSettings, values),
            compute=parse(Compute, values),
            results=Path(str(values["results"])),
            progress=bool(values["progress"]),
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
