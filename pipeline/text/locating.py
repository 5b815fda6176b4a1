"""LooGLE's evidence located in its document: each evidence string as character spans of the text (a
text's function, below the artifact, whose loader re-locates every stored span: ``pipeline.artifact.qa``).

LooGLE's annotators copied the evidence (``S`` of ``qa_pairs``) from another rendering of the page, so
it is often not a verbatim substring of ``input``: non-ASCII characters became ``?``, Wikipedia's
citation markers (``[6]``) came along, spaces were lost or added, text was elided with ``...`` or
paraphrased. ``locate`` tries these rules in order and keeps the first that finds the string:

1. ``exact``: the evidence (surrounding whitespace stripped) is a substring of the text.
2. ``normalised``: found in the text once both are normalised (``normalise``): citation markers
   (``[6]``, ``[es]``, ``[a]``: digits, or one or two lower-case letters) and all whitespace removed,
   ASCII letters in lower case, ``"`` read as ``'``, each run of ``?`` and non-ASCII characters one
   ``?``; a ``?`` of the evidence matches one such run of the text, or nothing (a space the evidence
   wrote as ``?``). The match maps back to the original characters, markers inside it included.
3. ``pieces``: the evidence split at ellipses (``...``, ``…``); every piece at least ``MIN_PIECE``
   normalised characters long and found by rule 1 or 2 after the previous one: one span per piece.
4. ``fuzzy``: an anchor (``ANCHOR`` normalised characters of the evidence, taken every ``ANCHOR``
   characters) found exactly once in the normalised text fixes a window (the evidence's length, and a
   fifth of it either side); ``difflib.SequenceMatcher`` aligns the evidence in it (``align``), and the
   aligned stretch is kept only when its ratio to the evidence is at least ``FUZZY_RATIO``. Each
   distinct window is aligned once, at most ``MAX_WINDOWS`` of them, and only an evidence string of at
   most ``MAX_FUZZY`` normalised characters is aligned at all: difflib's cost grows with the product of
   the lengths (a 20,000-character near-copy of its text took over 600 s), so a longer one is located
   by the other rules only; an unlocated string that met either cap says so (``Located.note``).
5. ``sentences``: the evidence split into its sentences and at ellipses (``SENTENCE``; a piece shorter than
   ``MIN_PIECE`` normalised characters joins the next, or the last the one before), each located on
   its own by rule 1, 2 or 4, in any order: annotators joined sentences that stand apart in the text
   without an ellipsis. Located only when every sentence is found, one span per sentence, in the
   evidence's order.

Anything else is ``unlocated``: never guessed. A string that occurs more than once is taken at its
first occurrence, and ``occurrences`` says how many there were.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from difflib import Match, SequenceMatcher

# In the order they are tried; an artifact's evidence table names one of them (or UNLOCATED).
RULES = ("exact", "normalised", "pieces", "fuzzy", "sentences")
UNLOCATED = "unlocated"
MIN_PIECE = 20  # normalised characters: a shorter piece of elided evidence locates nothing reliably
ANCHOR = 32  # normalised characters of an exact anchor for the fuzzy rule
FUZZY_RATIO = 0.9  # difflib's ratio (2 * matches / total length) the fuzzy rule requires
MIN_BLOCK = 4  # characters: shorter matching blocks are coincidences, not alignment
MAX_GAP = 20  # characters: how much two successive blocks' gaps may differ within one alignment
MAX_FUZZY = 1000  # normalised characters: the longest evidence string the fuzzy rule aligns (LooGLE's
# published test data's longest is 847)
MAX_WINDOWS = 8  # distinct windows the fuzzy rule aligns per string (that data's strings need at most 5)
ELLIPSIS = re.compile(r"\.{3,}|…")
SENTENCE = re.compile(  # where the sentences rule splits an evidence string
    r"\.{3,}|…"  # an ellipsis
    r"|(?<!\bSt\.)(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bJr\.)(?<=[.!?])"  # an end (not "St."), then
    r"(?:\[[0-9a-z]{1,4}\]|[\"')\]])*\s+(?=[A-Z0-9\"'(\[])"  # markers, a space and a capital
    r"|(?<=[a-z][.!])(?=[A-Z][a-z])"  # a full stop glued to the next sentence ("city.Even so"; not "?",
)  # LooGLE's evidence writes a non-ASCII character as "?": "the?Zona Franca")
TOKENS = re.compile(
    r"(?P<mark>\[(?:\d{1,4}|[a-z]{1,2})\])|(?P<space>[\s\u200b-\u200d\u2060\ufeff])"
    r"|(?P<odd>[?\x80-\U0010ffff])|.",
    re.S,
)

Span = tuple[int, int]


@dataclass(frozen=True)
class Normalised:
    """A normalised string and, for each of its characters, the original characters it stands for:
    ``text[i]`` is the normalised form of ``original[starts[i]:ends[i]]``."""

    text: str
    starts: list[int] = field(repr=False)
    ends: list[int] = field(repr=False)

    def span(self, start: int, end: int) -> Span:
        """The original characters of ``text[start:end]`` (a non-empty stretch)."""
        return self.starts[start], self.ends[end - 1]


def normalise(original: str) -> Normalised:
    """Markers and whitespace (Unicode's, and zero-width characters) removed, ASCII letters in lower
    case, ``"`` as ``'``, each run of ``?`` and other non-ASCII characters one ``?`` (merged across a
    removed marker or whitespace)."""
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    for match in TOKENS.finditer(original):
        kind = match.lastgroup
        if kind in ("mark", "space"):
            continue
        char = "?" if kind == "odd" else match.group().lower().replace('"', "'")
        if char == "?" and chars and chars[-1] == "?":
            ends[-1] = match.end()
            continue
        chars.append(char)
        starts.append(match.start())
        ends.append(match.end())
    return Normalised("".join(chars), starts, ends)


def settings() -> dict[str, object]:
    """The alignment's rules and constants, recorded with what it located (an artifact's manifest,
    `make loogle-evidence`'s JSON)."""
    names = ("MIN_PIECE", "ANCHOR", "FUZZY_RATIO", "MIN_BLOCK", "MAX_GAP", "MAX_FUZZY", "MAX_WINDOWS")
    return {"rules": list(RULES)} | {name.lower(): globals()[name] for name in names}


def pattern_of(normalised: str) -> re.Pattern[str] | None:
    """The regular expression rule 2 searches for: the normalised evidence with each ``?`` optional (it
    stands for one run of non-ASCII characters of the text, or for a character the text does not
    have, such as a space written as a no-break space); None when nothing else is left."""
    if not normalised.strip("?"):
        return None
    return re.compile("".join(r"\??" if c == "?" else re.escape(c) for c in normalised))


@dataclass(frozen=True)
class Located:
    """How one evidence string was located (a rule of ``RULES``, or ``unlocated``), its spans in the
    document's characters, how often its matched form occurs, and the fuzzy rule's ratio."""

    rule: str
    spans: tuple[Span, ...] = ()
    occurrences: int = 0
    ratio: float | None = None
    note: str | None = None  # why an unlocated string was not aligned (``MAX_FUZZY``)

    @property
    def located(self) -> bool:
        return self.rule != "unlocated"


class Document:
    """A document's text with its normalised form, made once for all of its evidence."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.norm = normalise(text)

    def find(self, evidence: str, after: int = 0) -> tuple[str, Span, int] | None:
        """Rule 1, then rule 2, from character ``after`` of the text: the rule, the span and the
        number of occurrences; None when neither finds it."""
        needle = evidence.strip()
        if not needle:
            return None
        start = self.text.find(needle, after)
        if start >= 0:
            return "exact", (start, start + len(needle)), self.text.count(needle, after)
        pattern = pattern_of(normalise(needle).text)
        norm_after = bisect.bisect_left(self.norm.starts, after)
        found = pattern.search(self.norm.text, norm_after) if pattern else None
        if found is None:
            return None
        count = sum(1 for _ in pattern.finditer(self.norm.text, norm_after))
        return "normalised", self.norm.span(found.start(), found.end()), count


def locate(evidence: str, document: Document) -> Located:
    """One evidence string located in the document by the first rule that finds it (module doc)."""
    found = document.find(evidence)
    if found:
        rule, span, count = found
        return Located(rule, (span,), count)
    pieces = locate_pieces(evidence, document)
    if pieces:
        return pieces
    fuzzy = locate_fuzzy(evidence, document)
    if fuzzy.located:
        return fuzzy
    return locate_sentences(evidence, document) or fuzzy


def locate_pieces(evidence: str, document: Document) -> Located | None:
    """Rule 3: every piece between ellipses found in order, each at least ``MIN_PIECE`` normalised
    characters long; None otherwise (also when the evidence has no ellipsis)."""
    if not ELLIPSIS.search(evidence):
        return None
    pieces = [p.strip() for p in ELLIPSIS.split(evidence) if normalise(p).text]
    if not pieces or any(len(normalise(p).text) < MIN_PIECE for p in pieces):
        return None
    spans: list[Span] = []
    most = 0
    after = 0
    for piece in pieces:
        found = document.find(piece, after)
        if not found:
            return None
        spans.append(found[1])
        most = max(most, found[2])
        after = found[1][1]
    return Located("pieces", tuple(spans), most)


def locate_fuzzy(evidence: str, document: Document) -> Located:
    """Rule 4: a window fixed by a unique exact anchor, the evidence aligned in it by difflib (each
    distinct window once, the first ``MAX_WINDOWS``), kept when the ratio of the aligned stretch is at
    least ``FUZZY_RATIO``; otherwise unlocated, with a note where a cap stopped it."""
    pattern = normalise(evidence.strip()).text
    text = document.norm.text
    if len(pattern) > MAX_FUZZY:
        return Located("unlocated", note=f"over MAX_FUZZY={MAX_FUZZY} normalised characters: not aligned")
    if len(pattern) < ANCHOR:
        return Located("unlocated")
    best: tuple[float, int, int] | None = None
    tried: set[tuple[int, int]] = set()
    note = None
    for offset in range(0, len(pattern) - ANCHOR + 1, ANCHOR):
        anchor = pattern[offset : offset + ANCHOR]
        hit = text.find(anchor)
        if hit < 0 or text.find(anchor, hit + 1) >= 0:
            continue  # absent, or not unique: no window
        slack = len(pattern) // 5
        lo, hi = max(0, hit - offset - slack), hit - offset + len(pattern) + slack
        if (lo, hi) in tried:
            continue  # the same window, the same alignment
        if len(tried) == MAX_WINDOWS:
            note = f"aligned in its first MAX_WINDOWS={MAX_WINDOWS} windows only"
            break
        tried.add((lo, hi))
        window = text[lo:hi]
        aligned = align(pattern, window)
        if aligned and (best is None or aligned[0] > best[0]):
            best = (aligned[0], lo + aligned[1], lo + aligned[2])
        if best and best[0] == 1.0:
            break
    if best is None or best[0] < FUZZY_RATIO:
        return Located("unlocated", note=note)
    ratio, start, end = best
    while start < end - 1 and text[start] != pattern[0] and not text[start].isalnum():
        start += 1  # a stretch begins with punctuation only where the evidence does
    return Located("fuzzy", (document.norm.span(start, end),), 1, round(ratio, 4))


def align(pattern: str, window: str) -> tuple[float, int, int] | None:
    """The stretch of ``window`` that difflib aligns with ``pattern``, and the ratio of ``pattern`` to
    it. The stretch runs over the chain of matching blocks (of at least ``MIN_BLOCK`` characters)
    around the longest one whose gaps in the window and in the pattern differ by at most ``MAX_GAP``
    characters: a stray match in the window's slack does not stretch it."""
    matcher = SequenceMatcher(None, pattern, window, autojunk=False)
    blocks = [b for b in matcher.get_matching_blocks() if b.size >= MIN_BLOCK]
    if not blocks:
        return None
    first = last = max(range(len(blocks)), key=lambda i: blocks[i].size)
    while first > 0 and consistent(blocks[first - 1], blocks[first]):
        first -= 1
    while last < len(blocks) - 1 and consistent(blocks[last], blocks[last + 1]):
        last += 1
    start, end = blocks[first].b, blocks[last].b + blocks[last].size
    return SequenceMatcher(None, pattern, window[start:end], autojunk=False).ratio(), start, end


def consistent(before: Match, after: Match) -> bool:
    """Whether two successive matching blocks are as far apart in the window as in the pattern
    (within ``MAX_GAP`` characters)."""
    gap_pattern = after.a - (before.a + before.size)
    gap_window = after.b - (before.b + before.size)
    return abs(gap_window - gap_pattern) <= MAX_GAP


def sentences(evidence: str) -> list[str]:
    """The evidence's sentences (``SENTENCE``), a piece shorter than ``MIN_PIECE`` normalised
    characters joined to the next one (the last to the one before)."""
    pieces: list[str] = []
    carry = ""
    for piece in SENTENCE.split(evidence.strip()):
        carry = f"{carry} {piece}".strip()
        if len(normalise(carry).text) >= MIN_PIECE:
            pieces.append(carry)
            carry = ""
    if carry:
        if pieces:
            pieces[-1] = f"{pieces[-1]} {carry}"
        else:
            pieces.append(carry)
    return pieces


def locate_sentences(evidence: str, document: Document) -> Located | None:
    """Rule 5: every sentence of the evidence located on its own by rule 1, 2 or 4 (in any order);
    None when it has one sentence only or any sentence is not found."""
    pieces = sentences(evidence)
    if len(pieces) < 2:
        return None
    spans: list[Span] = []
    most, ratios = 0, []
    for piece in pieces:
        found = document.find(piece)
        if found:
            spans.append(found[1])
            most = max(most, found[2])
            continue
        fuzzy = locate_fuzzy(piece, document)
        if not fuzzy.located:
            return None
        spans += fuzzy.spans
        most = max(most, fuzzy.occurrences)
        ratios.append(fuzzy.ratio)
    return Located("sentences", tuple(spans), most, min(ratios) if ratios else None)
