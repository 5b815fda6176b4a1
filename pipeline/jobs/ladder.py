"""The ladder job (`make ladder`): the score stage at each rung of a context ladder and at full context
(``pipeline.ladder.rungs``), the effective context length (``pipeline.ladder.effective``), its picture
(beside the model's forgetting curve when it has one) and its results line (``ladder.jsonl``, with the
provenance of ``make score``'s lines: ``pipeline.results.score.score_row`` of the full rung)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.files import recorded_path
from pipeline.formats import file_slug
from pipeline.jobs.recipe import ArtifactInput, JobResult, ModelInput, Record, TypedJob
from pipeline.ladder.effective import effective_length
from pipeline.ladder.rungs import LadderRun, LadderSettings, run_ladder
from pipeline.marks import folder_for
from pipeline.models.loading import LoadedModel, ModelChoice
from pipeline.models.logprobs import TargetScorer
from pipeline.outputs import Output
from pipeline.reporting.ladder import write_plot
from pipeline.results import forgetting as forgetting_results
from pipeline.results import ladder as ladder_lines
from pipeline.results.keys import model_key
from pipeline.results.score import score_row
from pipeline.settings import Compute, ScoreSettings, flag, parse, parse_group


@dataclass(frozen=True)
class LadderJob(TypedJob, ArtifactInput):
    """`make ladder`'s settings, typed: the model, the artifact, the rungs and how the effective length
    is read, the score settings of every rung, and where the line, the picture and the model's
    forgetting curve are."""

    model: ModelInput
    artifact: str | Path | KeyTokenArtifact
    ladder: LadderSettings
    settings: ScoreSettings
    compute: Compute
    results: Path
    plot_dir: Path
    forgetting_results: Path
    progress: bool = False
    results_setting = "results"

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> LadderJob:
        """``conf/ladder.yaml`` as plain data, typed and checked."""
        results_path = Path(str(values["results"]))
        forgetting = values.get("forgetting_results") or results_path.with_name("forgetting.jsonl")
        return cls(
            model=parse_group(ModelChoice, values, "model"),
            artifact=str(values["artifact"]),
            ladder=parse(LadderSettings, values),
            settings=parse(ScoreSettings, values),
            compute=parse(Compute, values),
            results=results_path,
            plot_dir=Path(str(values["plot_dir"])),
            forgetting_results=Path(str(forgetting)),
            progress=flag(values["progress"], "progress"),
        )

    results_kind = ladder_lines.KIND
    append = staticmethod(ladder_lines.append)

    def outputs(self) -> list[Output]:
        return [Output("plot_dir", self.plot_dir, folder_for("folders of pictures", "ladder"))]

    def measure(
        self,
        lm: LoadedModel,
        scorer: TargetScorer,
        artifact: KeyTokenArtifact,
        record: Record,
        started: float,
    ) -> JobResult:
        """The rungs' passes, the effective length, the line; the picture written before the line."""
        passes = run_ladder(artifact, lm, self.ladder, self.settings, scorer, progress=self.progress)
        row = ladder_line(passes, self.ladder, self.model.display_name, lm, started)
        name = f"{file_slug(row['model_name'], 'model')}--{file_slug(row['artifact']['name'], 'artifact')}"
        plot = self.plot_dir.absolute() / f"{name}--{row['result_id']}.png"
        row["plot"] = recorded_path(plot)
        write_plot(row, forgetting_curve(self.forgetting_results, row["model"]), plot)
        record(row)
        return JobResult(row, warnings=passes.results[-1].warnings)


def ladder_line(
    passes: LadderRun, ladder: LadderSettings, model_name: str, lm: LoadedModel, started: float
) -> dict[str, Any]:
    """The ladder's results line, without the picture's path (``plot``) until it is written."""
    reading = effective_length(
        passes.sums,
        ladder.tolerance,
        bootstrap=ladder.bootstrap,
        seed=ladder.seed,
        confidence=ladder.confidence,
    )
    base = score_row(model_name, lm, passes.results[-1], time.time() - started)
    return ladder_lines.ladder_row(
        base,
        ladder_settings(passes, ladder, base["settings"]),
        rung_lines(passes, reading["rungs"]),
        reading["effective"],
        seconds=time.time() - started,
        plot=None,
    )


def ladder_settings(passes: LadderRun, ladder: LadderSettings, scored: dict[str, Any]) -> dict[str, Any]:
    """The full rung's score settings (the rungs differ only in ``context_limit``) and the ladder's."""
    return {
        **{k: v for k, v in scored.items() if k != "context_limit"},
        "ladder": [w for w in passes.rungs if w is not None],
        "ladder_setting": None if ladder.ladder is None else list(ladder.ladder),
        "tolerance": ladder.tolerance,
        "bootstrap": ladder.bootstrap,
        "seed": ladder.seed,
        "confidence": ladder.confidence,
        "documents": ladder.documents,
    }


def rung_lines(passes: LadderRun, statistics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rung: the score stage's corpus and per-document values; per document, the key tokens'
    NLL sum and how many of them the rung limits; the model time, the documents the full pass
    served, and the rung's statistics."""
    return [
        {
            "context_limit": limit,
            "corpus": scored.corpus,
            "documents": scored.documents,
            "key_nll": [float(x) for x in passes.sums.key_nll[:, r]],
            "key_limited": [int(x) for x in passes.sums.limited[:, r]],
            "copied_documents": passes.copied[r],
            "seconds": round(passes.seconds[r], 3),
            **statistics[r],
        }
        for r, (limit, scored) in enumerate(zip(passes.rungs, passes.results, strict=True))
    ]


def forgetting_curve(path: Path, model: dict[str, Any]) -> dict[str, Any] | None:
    """The newest forgetting curve of this very model (its identity, not its name), or None."""
    if not path.is_file():
        return None
    curves = forgetting_results.newest_per_identity(forgetting_results.read_rows(path))
    return curves.get(model_key(model))
