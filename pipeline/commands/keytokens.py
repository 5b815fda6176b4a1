"""Stage 1: an evaluator's key tokens of a corpus, as an artifact with a page per document.
`make keytokens` (``conf/keytokens.yaml``): the job ``pipeline.jobs.keytokens``, its tasks on datatrove."""

from __future__ import annotations

from typing import Any

from pipeline import api
from pipeline.commands.shell import hydra_main, plain
from pipeline.jobs.keytokens import KeyTokensJob
from pipeline.reporting.keytokens import summary


def run(cfg: Any) -> dict[str, Any] | None:
    done = api.run(KeyTokensJob.from_config(plain(cfg))).value
    print(summary(done))
    return done.manifest


def main() -> None:
    hydra_main("keytokens", run)


if __name__ == "__main__":
    main()
