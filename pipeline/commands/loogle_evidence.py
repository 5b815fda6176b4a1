"""LooGLE's evidence located in its documents, per task and rule.
`make loogle-evidence` (``conf/loogle_evidence.yaml``): ``pipeline.loogle.evidence.alignment_report``."""

from __future__ import annotations

from typing import Any

from pipeline.api import run_work
from pipeline.commands.shell import hydra_main, plain
from pipeline.loogle.evidence.alignment_report import EvidenceOptions, locate_evidence
from pipeline.reporting.loogle_evidence import summary


def run(cfg: Any) -> dict[str, Any]:
    result, out = run_work(locate_evidence, EvidenceOptions, plain(cfg))
    print(summary(result, out))
    return result


def main() -> None:
    hydra_main("loogle_evidence", run)


if __name__ == "__main__":
    main()
