"""The paper's own key spans (data/official-key-text) as a key_spans artifact.

``longppl import-official official=<evaluator> [key=value ...]`` (`make import-official
EVALUATOR=<name>`; Hydra overrides of ``conf/import_official.yaml``)."""

from __future__ import annotations

from typing import Any

from pipeline.commands.shell import hydra_main, plain
from pipeline.definition import KeyTokenDefinition
from pipeline.official.run import ImportOptions, OfficialSpans
from pipeline.official.run import run as import_spans
from pipeline.settings import parse
from pipeline.text.corpus import CorpusSpec


def run(cfg: Any) -> dict[str, Any]:
    """The settings typed (an unknown key of the ``official`` group is a typo), then the import."""
    values = plain(cfg)
    options = parse(ImportOptions, values)
    parse(OfficialSpans, values["official"], prefix="official.", strict=True)
    definition = parse(KeyTokenDefinition, {**values, "short_window_bos": False})
    return import_spans(options, definition, CorpusSpec.parse(values["corpus"]))


def main() -> None:
    hydra_main("import_official", run)


if __name__ == "__main__":
    main()
