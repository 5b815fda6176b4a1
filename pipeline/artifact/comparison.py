"""Two key-token artifacts compared (`make compare-artifacts`): are they the same bytes (their exact
contents hashes), the same artifact (``identity.differences``: fingerprint, discrete contents, value
summaries within the measured tolerance; every value when both hold per-token values:
``identity.compare_tables``), and how far apart are their values."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pydantic.dataclasses

from pipeline.artifact.identity import compare_tables, differences, table_differences
from pipeline.artifact.reader import open_artifact
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.settings import Text


@pydantic.dataclasses.dataclass(frozen=True)
class CompareOptions:
    """`make compare-artifacts`'s settings (``conf/compare_artifacts.yaml``): the two artifacts."""

    a: Text
    b: Text | None = None


@dataclass
class Comparison:
    """The two artifacts, their per-token differences (None unless both hold per-token values), what
    keeps them from being the same artifact (empty: the same), and whether their bytes are equal."""

    a: KeyTokenArtifact
    b: KeyTokenArtifact
    report: dict[str, Any] | None
    problems: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return self.a.contents == self.b.contents

    @property
    def outcome(self) -> dict[str, Any]:
        """Whether the bytes are equal, and the per-token differences."""
        return {"exact": self.exact, "report": self.report}

    def check(self) -> Comparison:
        """Itself; a PipelineError naming what differs when they are not the same artifact."""
        if self.problems:
            raise PipelineError("not the same artifact: " + "; ".join(self.problems))
        return self


def compare_artifacts(options: CompareOptions) -> Comparison:
    """Both artifacts opened (every check) and compared."""
    if options.b is None:
        raise PipelineError("give the artifact to compare with: b=<directory or hf://datasets/...>")
    a, b = open_artifact(options.a), open_artifact(options.b)
    problems = differences(b.identity, a.identity)
    report = compare_tables(a, b) if a.has_token_values and b.has_token_values else None
    if report is not None:
        problems += table_differences(report)  # both at hand: every value, not only its summaries
    return Comparison(a, b, report, problems)
