"""Stage 1: an evaluator's key tokens of a corpus, as an artifact with a page per document.
`make keytokens` (``conf/keytokens.yaml``): the job ``pipeline.jobs.keytokens``."""

from __future__ import annotations

from typing import Any

from pipeline.commands.shell import hydra_main, plain
from pipeline.jobs.keytokens import KeyTokenSettings, make_keytokens
from pipeline.reporting.keytokens import summary


def run(cfg: Any) -> dict[str, Any]:
    done = make_keytokens(KeyTokenSettings.from_config(plain(cfg)))
    if done.artifact is not None:  # rank 0 of a data-parallel run
        print(summary(done))
    return done.manifest


def main() -> None:
    hydra_main("keytokens", run)


if __name__ == "__main__":
    main()
