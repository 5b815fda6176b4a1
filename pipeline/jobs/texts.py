"""The texts job: the model's tokens of each text and their log-probs, as `make score` computes them
(the score engine's one loop, without an artifact): what lm-eval's model ``longppl`` answers to its
``loglikelihood_rolling`` requests (``pipeline.lmeval.model``), the LongPPL tasks then carrying the key
spans onto those tokens. No results line: lm-eval writes its own results file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.jobs.recipe import JobResult, ModelInput, Record, TypedJob
from pipeline.models.loading import LoadedModel
from pipeline.models.logprobs import TargetScorer
from pipeline.outputs import Checked, Output
from pipeline.results.lines import JSON_LINES
from pipeline.score.engine import Text, logprobs, plain_texts
from pipeline.settings import Compute, ScoreSettings


@dataclass(frozen=True)
class TextsJob(TypedJob):
    """The texts (each an id for messages and the text) and `make score`'s settings."""

    model: ModelInput
    texts: tuple[Text, ...]
    settings: ScoreSettings
    compute: Compute
    progress: bool = False
    results = None
    results_setting = "results"
    results_kind = JSON_LINES

    def outputs(self) -> list[Output]:
        return []

    def needs_hub(self) -> bool:
        return False

    def open(self) -> tuple[Text, ...]:
        return self.texts

    def append(self, target: Checked, row: dict[str, Any]) -> None:
        raise AssertionError("a texts job writes no results line")

    def measure(
        self, lm: LoadedModel, scorer: TargetScorer, texts: tuple[Text, ...], record: Record, started: float
    ) -> JobResult:
        """``ModelTokens`` per text, in the order given (a repeated text is computed once)."""
        unique = plain_texts(list(texts), lm, self.settings)
        tokens = dict(
            zip(
                (t.text for t in unique.texts),
                logprobs(unique, lm, scorer, progress=self.progress),
                strict=True,
            )
        )
        return JobResult([tokens[t.text] for t in texts])
