"""A key-token artifact as a Hub dataset: its folder written, then uploaded.

``longppl publish artifact=<dir> repo=<org>/<name> [key=value ...]`` (`make publish ARTIFACT=...
REPO=...`; Hydra overrides of ``conf/publish.yaml``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic.dataclasses

from pipeline.commands.shell import hydra_main, plain
from pipeline.errors import PipelineError
from pipeline.settings import Text, parse
from pipeline.sharing.hub_dataset import check_repo, prepare_folder, upload


@pydantic.dataclasses.dataclass(frozen=True)
class PublishOptions:
    artifact: str
    repo: Text | None = None  # <org>/<name> of the dataset repository
    dry_run: bool = False  # only write the folder that would be uploaded
    out_dir: str | None = None  # None: artifacts/publish/<org>--<name>
    license: Text = "cc-by-4.0"
    private: bool = False


def run(cfg: Any) -> Path:
    options = parse(PublishOptions, plain(cfg))
    if not options.repo:
        raise PipelineError("set REPO=<org>/<name> (the Hub dataset to create or update)")
    check_repo(options.repo)
    out = Path(options.out_dir or f"artifacts/publish/{options.repo.replace('/', '--')}")
    folder = prepare_folder(options.artifact, out, options.repo, options.license)
    if options.dry_run:
        print(f"dry run: the folder that would be uploaded to {options.repo} is {folder}")
        return folder
    print(f"uploaded: {upload(folder, options.repo, options.private)}")
    return folder


def main() -> None:
    hydra_main("publish", run)


if __name__ == "__main__":
    main()
