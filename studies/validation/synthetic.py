"""Seeded LongEval-style retrieval documents ("lines" task, Li et al. 2023), with the answers known by
character span.

A document is a record of lines ``line <name>: REGISTER_CONTENT is <NNNNN>``, then a question-and-answer
part: for some lines, ``Question: what is the <REGISTER_CONTENT> in line <name>?`` and the answer
``Answer: The <REGISTER_CONTENT> in line <name> is <NNNNN>.``. The digits of each answer are the
*answer tokens* (paper Fig. 2a): only a model that retrieves the queried line from far back in the
context can predict them. Every other token of the question-and-answer part follows from the last
few tokens (the answer format repeats the question) or cannot be predicted at all (which line is
asked next).

The queried lines are drawn from the record's first part only, ``min_gap_lines`` lines or more before
the question-and-answer part, so that a short context of a few hundred tokens never contains them
while the full context always does; their depths are stratified over that part, so that a model
with a context of W tokens can answer some of the questions, more as W grows.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from pipeline.files import write_bytes_atomic

HEADER = (
    "Below is a record of lines I want you to remember. Each line begins with 'line <line name>' and "
    "contains a '<REGISTER_CONTENT>' at the end of the line as a numerical value. For each line name, "
    "memorize its corresponding <REGISTER_CONTENT>. At the end of the record, I will ask you to "
    "retrieve the corresponding <REGISTER_CONTENT> of a certain line name.\n\n"
)
QA_INTRO = "\nNow answer the questions about the record above.\n"

ADJECTIVES: tuple[str, ...] = tuple(
    str.split(
        "amber ancient bitter bold brave brisk calm clever cold cosmic crimson curly damp dark eager early "
        "fancy fierce fluffy frozen gentle giant golden grand happy hidden hollow humble icy jolly lazy "
        "little lively loud lucky mellow misty modern narrow noble odd pale polite proud quick quiet rapid "
        "rare restless rough royal rusty salty scarlet shiny silent silver simple sleepy smooth solid "
        "spicy steady stormy sunny swift tall tender tidy tiny vivid wandering warm wild windy wise young"
    )
)
NOUNS: tuple[str, ...] = tuple(
    str.split(
        "anchor apple arrow badge banner barrel basket beacon bell bridge brook bucket cabin canyon castle "
        "cedar chapel cliff clock cloud comet coral crane crystal desert dragon drum eagle ember falcon "
        "feather fern forest fountain garden glacier harbor hammer helmet island jacket kettle ladder "
        "lantern lemon meadow mirror mountain needle oak orchard otter palace pebble pepper pillar planet "
        "pond prairie quarry rabbit ribbon river saddle shadow shell spoon summit thunder tiger tower "
        "tulip valley violin walnut willow window"
    )
)


@dataclass(frozen=True)
class SyntheticDocument:
    """One retrieval document: its text, where the question-and-answer part starts, and, per
    question, the queried line, its depth, and the answer's character span (the digits only)."""

    id: str
    text: str
    qa_start: int  # character offset of the first "Question:"
    answer_spans: list[list[int]]  # [start, end) of each answer's digits, in text order
    response_spans: list[list[int]]  # [start, end) of each "Answer: ... <NNNNN>." line (paper Fig. 3)
    answers: list[str]
    queried_lines: list[int]  # index of the queried line in the record, per question
    n_lines: int

    def to_row(self) -> dict:
        return asdict(self)


def line_names(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` distinct ``adjective-noun`` names."""
    if n > len(ADJECTIVES) * len(NOUNS):
        raise ValueError(f"at most {len(ADJECTIVES) * len(NOUNS)} distinct line names (asked {n})")
    picks = rng.choice(len(ADJECTIVES) * len(NOUNS), size=n, replace=False)
    return [f"{ADJECTIVES[p // len(NOUNS)]}-{NOUNS[p % len(NOUNS)]}" for p in picks]


def queried_lines(rng: np.random.Generator, n_lines: int, n_questions: int, min_gap_lines: int) -> list[int]:
    """Distinct line indices, one drawn from each of ``n_questions`` equal strata of the lines that
    lie at least ``min_gap_lines`` lines before the end of the record, in shuffled order."""
    eligible = n_lines - min_gap_lines
    if eligible < n_questions:
        raise ValueError(f"{n_lines} lines leave {eligible} eligible lines for {n_questions} questions")
    edges = np.linspace(0, eligible, n_questions + 1).astype(int)
    picks = [int(rng.integers(edges[q], edges[q + 1])) for q in range(n_questions)]
    return [picks[i] for i in rng.permutation(n_questions)]


def make_document(
    seed: int, index: int, n_lines: int = 150, n_questions: int = 8, min_gap_lines: int = 32
) -> SyntheticDocument:
    """Document ``index`` of the corpus with ``seed``: the same arguments give the same document."""
    rng = np.random.default_rng([seed, index])
    names = line_names(rng, n_lines)
    values = [str(v) for v in rng.choice(np.arange(10000, 100000), size=n_lines, replace=False)]
    parts = [HEADER]
    parts += [
        f"line {name}: REGISTER_CONTENT is <{value}>\n" for name, value in zip(names, values, strict=True)
    ]
    parts.append(QA_INTRO)
    text = "".join(parts)
    qa_start = len(text)
    asked = queried_lines(rng, n_lines, n_questions, min_gap_lines)
    spans: list[list[int]] = []
    responses: list[list[int]] = []
    for line in asked:
        text += f"Question: what is the <REGISTER_CONTENT> in line {names[line]}?\n"
        response_start = len(text)
        text += f"Answer: The <REGISTER_CONTENT> in line {names[line]} is <"
        spans.append([len(text), len(text) + len(values[line])])
        text += f"{values[line]}>."
        responses.append([response_start, len(text)])
        text += "\n"
    return SyntheticDocument(
        id=f"longeval-{index:02d}",
        text=text,
        qa_start=qa_start,
        answer_spans=spans,
        response_spans=responses,
        answers=[values[line] for line in asked],
        queried_lines=asked,
        n_lines=n_lines,
    )


def make_corpus(seed: int, n_documents: int, **kwargs: int) -> list[SyntheticDocument]:
    return [make_document(seed, i, **kwargs) for i in range(n_documents)]


def write_corpus(docs: list[SyntheticDocument], path: str | Path) -> Path:
    """A JSONL corpus that stage 1's ``corpus=local`` reads (``id``, ``text``, plus the answer spans)."""
    path = Path(path)
    body = "".join(json.dumps(d.to_row(), ensure_ascii=False, sort_keys=True) + "\n" for d in docs)
    write_bytes_atomic(path, body.encode("utf-8"))
    return path


def read_corpus(path: str | Path) -> list[SyntheticDocument]:
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]
    return [SyntheticDocument(**row) for row in rows]
