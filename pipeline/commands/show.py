"""An artifact's key-token pages: one document's or every document's, with the index.

``longppl show [key=value ...]`` (`make show`; Hydra overrides of ``conf/show.yaml``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic.dataclasses

from pipeline.artifact.reader import load_artifact
from pipeline.commands.shell import hydra_main, plain
from pipeline.reporting.keytoken_page import page_name, write_page, write_views
from pipeline.settings import Text, parse


@pydantic.dataclasses.dataclass(frozen=True)
class ShowOptions:
    artifact: str
    doc_id: Text | None = None  # None: the first document
    all: bool = False  # every document's page
    out: str | None = None  # that one page to this file instead (no index)


def run(cfg: Any) -> Path:
    """``out`` given: that one page there. Otherwise into ``<artifact>/views``: the page of
    ``doc_id`` (null: the first document; ``all=true``: every document) and the index."""
    options = parse(ShowOptions, plain(cfg))
    artifact = Path(options.artifact)
    if options.out:
        path = write_page(artifact, Path(options.out), options.doc_id)
    else:
        art = load_artifact(artifact)
        doc_id = options.doc_id or art.documents["doc_id"][0].as_py()
        index = write_views(art, None if options.all else [doc_id])
        path = index.parent / page_name(doc_id)
        print(f"wrote {index}")
    print(f"wrote {path}")
    return path


def main() -> None:
    hydra_main("show", run)


if __name__ == "__main__":
    main()
