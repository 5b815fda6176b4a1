"""WordNet 3.0 put where nltk's METEOR reads it (the last step of make setup-loogle)."""

from __future__ import annotations

from pipeline.errors import ArgumentParser, one_line_errors
from pipeline.loogle.metrics.wordnet import install, nltk_wordnet_dir


def main() -> None:
    with one_line_errors():
        ArgumentParser(prog="longppl setup-loogle", description=__doc__).parse_args()  # it takes none
        print(f"WordNet for nltk in {install(nltk_wordnet_dir())}")


if __name__ == "__main__":
    main()
