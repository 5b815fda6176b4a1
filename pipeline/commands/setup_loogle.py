"""WordNet 3.0 put where nltk's METEOR reads it (the last step of make setup-loogle)."""

from __future__ import annotations

import sys

from pipeline.errors import PipelineError, stopped_on_interrupt
from pipeline.loogle.metrics.wordnet import install, nltk_wordnet_dir


def main() -> None:
    try:
        with stopped_on_interrupt():
            print(f"WordNet for nltk in {install(nltk_wordnet_dir())}")
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
