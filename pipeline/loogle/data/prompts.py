"""LooGLE's prompts and generation lengths (its repository's ``config/task2prompt.json`` and
``task2maxlen.json``, shipped in ``data/loogle``), and a question's prompt split into the instruction
before the text, the text, and the question after it (so that a cut can be checked to keep the
instruction and the question whole)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache

from pipeline.loogle.data.questions import SAMPLE_DIR, Question, check_task

INPUT = "{input}"


@cache
def templates() -> dict[str, str]:
    return json.loads((SAMPLE_DIR / "task2prompt.json").read_text(encoding="utf-8"))


@cache
def max_new_tokens() -> dict[str, int]:
    """LooGLE's generation length per task."""
    return {task: int(n) for task, n in json.loads((SAMPLE_DIR / "task2maxlen.json").read_text()).items()}


@dataclass(frozen=True)
class Prompt:
    """A question's prompt: ``text`` whole; the text of the document spans ``[start, end)`` of it."""

    text: str
    start: int
    end: int


def prompt_for(question: Question) -> Prompt:
    """The prompt as LooGLE builds it for ``question`` (``build_prompt`` with its task, question and text)."""
    return build_prompt(question.task, question.question, question.context)


def build_prompt(task: str, question: str, context: str) -> Prompt:
    """The task's template formatted with ``context`` (``input``) and, for a question task, the question
    (``Q``); braces in the text or question are kept as they are."""
    template = templates()[check_task(task)]
    before, _, after = template.partition(INPUT)
    fields = {"Q": question}
    head, tail = before.format(**fields), after.format(**fields)
    return Prompt(head + context + tail, len(head), len(head) + len(context))
