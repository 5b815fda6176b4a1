"""LooGLE's evidence located in its documents, per task and rule.
`make loogle-evidence` (``conf/loogle_evidence.yaml``): ``pipeline.loogle.evidence.alignment_report``."""

from __future__ import annotations

from typing import Any

from pipeline.commands.shell import hydra_main, plain
from pipeline.jobs.recipe import offline_unless
from pipeline.loogle.evidence.alignment_report import EvidenceOptions, locate_evidence
from pipeline.reporting.loogle_evidence import summary
from pipeline.settings import parse


def run(cfg: Any) -> dict[str, Any]:
    options = parse(EvidenceOptions, plain(cfg))
    with offline_unless(options.source.data == "hub"):
        result, out = locate_evidence(options)
    print(summary(result, out))
    return result


def main() -> None:
    hydra_main("loogle_evidence", run)


if __name__ == "__main__":
    main()
