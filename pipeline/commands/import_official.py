"""The paper's own key spans (data/official-key-text) as a key_spans artifact.
`make import-official` (``conf/import_official.yaml``): the job ``pipeline.jobs.import_official``."""

from __future__ import annotations

from typing import Any

from pipeline import api
from pipeline.commands.shell import hydra_main, plain
from pipeline.jobs.import_official import ImportJob


def run(cfg: Any) -> dict[str, Any]:
    return api.run(ImportJob.from_config(plain(cfg))).value


def main() -> None:
    hydra_main("import_official", run)


if __name__ == "__main__":
    main()
