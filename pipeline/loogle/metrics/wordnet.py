"""WordNet 3.0 for nltk's METEOR, offline: the dictionary files of Debian's ``wordnet-base`` and
``wordnet-sense-index`` packages, put where nltk's corpus reader looks (``<venv>/share/nltk_data/corpora/
wordnet``), with the ``lexnames`` file those packages lack, written from the list that WordNet's own
``lexnames(5WN)`` manual page documents. Installed by
`make setup-loogle` (``pipeline.commands.setup_loogle``)."""

from __future__ import annotations

import gzip
import re
import shutil
import sys
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.files import write_bytes_atomic

DEBIAN_DICT = Path("/usr/share/wordnet")
LEXNAMES_PAGE = Path("/usr/share/man/man5/lexnames.5WN.gz")
# The files nltk's WordNetCorpusReader opens for English (the data and index files of the four parts of
# speech, their exception lists, the sense index and the lexicographer files' names).
PARTS = ("adj", "adv", "noun", "verb")
FILES = (
    *(f"{kind}.{pos}" for kind in ("data", "index") for pos in PARTS),
    *(f"{pos}.exc" for pos in PARTS),
    "index.sense",
)
CATEGORY = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}  # lexnames(5WN): the syntactic category codes
ENTRY = re.compile(r"^(\d\d)\t((noun|verb|adj|adv)\.\w+)\s*\t")
# WordNet 3.0's 45 lexicographer files in number order, as lexnames(5WN) lists them: used where the
# manual page is not installed (images that leave out /usr/share/man); a test keeps the two equal.
LEXICOGRAPHER_FILES = [
    "adj.all",
    "adj.pert",
    "adv.all",
    "noun.Tops",
    "noun.act",
    "noun.animal",
    "noun.artifact",
    "noun.attribute",
    "noun.body",
    "noun.cognition",
    "noun.communication",
    "noun.event",
    "noun.feeling",
    "noun.food",
    "noun.group",
    "noun.location",
    "noun.motive",
    "noun.object",
    "noun.person",
    "noun.phenomenon",
    "noun.plant",
    "noun.possession",
    "noun.process",
    "noun.quantity",
    "noun.relation",
    "noun.shape",
    "noun.state",
    "noun.substance",
    "noun.time",
    "verb.body",
    "verb.change",
    "verb.cognition",
    "verb.communication",
    "verb.competition",
    "verb.consumption",
    "verb.contact",
    "verb.creation",
    "verb.emotion",
    "verb.motion",
    "verb.perception",
    "verb.possession",
    "verb.social",
    "verb.stative",
    "verb.weather",
    "adj.ppl",
]


def nltk_wordnet_dir() -> Path:
    """Where nltk finds WordNet for this Python (its data path ``<prefix>/share/nltk_data``)."""
    return Path(sys.prefix) / "share" / "nltk_data" / "corpora" / "wordnet"


def page_names(page: Path = LEXNAMES_PAGE) -> list[str] | None:
    """The lexicographer files that the manual page's table lists, in number order; None without it."""
    if not page.is_file():
        return None
    rows = [ENTRY.match(line) for line in gzip.decompress(page.read_bytes()).decode().splitlines()]
    return [m[2] for m in rows if m]


def lexnames(page: Path = LEXNAMES_PAGE) -> str:
    """The ``lexnames`` file (number, name, category; tab separated): the manual page's table, or the
    same list kept here where the page is not installed."""
    names = page_names(page) or LEXICOGRAPHER_FILES
    if len(names) != 45:
        raise PipelineError(f"{page}: expected WordNet 3.0's 45 lexicographer files, found {len(names)}")
    return "".join(f"{n:02d}\t{name}\t{CATEGORY[name.partition('.')[0]]}\n" for n, name in enumerate(names))


def install(target: Path, source: Path = DEBIAN_DICT, page: Path = LEXNAMES_PAGE) -> Path:
    """Copy the dictionary files to ``target`` and write ``lexnames`` there; returns ``target``."""
    missing = [name for name in FILES if not (source / name).is_file()]
    if missing:
        raise PipelineError(
            f"WordNet files missing in {source} ({', '.join(missing)}): run `apt-get install "
            "--no-install-recommends wordnet-base wordnet-sense-index` as root, then `make setup-loogle`"
        )
    target.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copyfile(source / name, target / name)
    write_bytes_atomic(target / "lexnames", lexnames(page).encode())
    return target
