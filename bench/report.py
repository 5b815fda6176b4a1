"""The report pages the benchmarks write, under docs/reports/: one page per subject (``PAGES``), each
made of sections, one per bench or part of one. A bench renders its section as a page of its own
(``# title``, then what it measured, its command and machine, its table); ``write_section`` puts it,
its headings one level down, between its markers on its page and leaves the other sections as they
are. The page's head (its title and what each section holds) is rebuilt from ``PAGES``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from bench.runner import ROOT
from pipeline.files import write_bytes_atomic

REPORTS = ROOT / "docs" / "reports"
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


@dataclass(frozen=True)
class Section:
    key: str
    what: str  # one line: what it measures
    command: str  # the command that writes it (or, for a section kept by hand, that measures it)
    data: str = ""  # where its measured data lie, if anywhere but the section itself
    written: bool = True  # False: the command prints its measurements, the section is kept by hand


@dataclass(frozen=True)
class Page:
    title: str
    intro: str
    sections: tuple[Section, ...]


PAGES: dict[str, Page] = {
    "benchmarks.md": Page(
        "Benchmarks against the official code and plain perplexity",
        "Time, memory and agreement of both stages, the drop-in `compute_longppl`, the lm-eval route "
        "and the float32 output head, each against what it replaces.",
        (
            Section(
                "official",
                "both stages against the official `longppl` 0.3.0 and plain PPL, 1k-32k tokens",
                "make bench",
                "artifacts/bench/jobs.jsonl",
            ),
            Section(
                "dropin",
                "the drop-in `compute_longppl` against the official one",
                'make bench-official ARGS="--only dropin"',
                "artifacts/bench/jobs.jsonl",
            ),
            Section(
                "lmeval",
                "make lm-eval against make score; lm-eval's hf against longppl",
                "make bench-lmeval",
                written=False,
            ),
            Section("head-float32", "the float32 head of a bfloat16 model", "make bench-head"),
        ),
    ),
    "cost.md": Page(
        "What the checks, the ladder and LongCE cost",
        "The cost of the artifact checks on load, of the context ladder against one score run, and "
        "of a LongCE training step against CE.",
        (
            Section(
                "checks",
                "the artifact checks against the newest score run on it",
                "make bench-checks",
                written=False,
            ),
            Section("ladder", "the context ladder against one make score", "make bench-ladder"),
            Section("longce", "time and memory per training step: LongCE against CE", "make bench-longce"),
        ),
    ),
    "memory.md": Page(
        "Peak memory of attention and of both stages at long inputs",
        "Peak memory of sliding-window and plain causal attention, transformers' sdpa against "
        "blocked_sdpa, and of both stages on one document of up to 128k tokens.",
        (
            Section("attention", "sliding-window attention at 8k and 16k tokens", "make bench-attention"),
            Section(
                "attention-math",
                "plain causal attention on sdpa's math backend",
                'make bench-attention ARGS="--math --implementations sdpa blocked_sdpa"',
            ),
            Section("long", "both stages at 32k/64k/128k tokens, tiny model", "make bench-long-memory"),
        ),
    ),
}
BEGIN, END = "<!-- section: {} -->", "<!-- end of section: {} -->"


def demoted(text: str) -> str:
    """``text`` with its Markdown headings one level down (fenced code kept as it is)."""
    fences = FENCE.findall(text)
    body = re.sub(r"^(#+ )", r"#\1", FENCE.sub("\0", text), flags=re.M)
    for fence in fences:
        body = body.replace("\0", fence, 1)
    return body


def sections(text: str) -> dict[str, str]:
    """The sections of a page's text, by key."""
    pattern = re.compile(r"^<!-- section: (\S+) -->\n(.*?)^<!-- end of section: \1 -->$", re.S | re.M)
    return {m.group(1): m.group(2) for m in pattern.finditer(text)}


def head(page: Page) -> str:
    lines = [
        f"# {page.title}",
        "",
        page.intro,
        "",
        "| section | what | command | data |",
        "|---|---|---|---|",
    ]
    for s in page.sections:
        command = f"`{s.command}`" + ("" if s.written else " (prints; the section is kept by hand)")
        lines.append(f"| {s.key} | {s.what} | {command} | {f'`{s.data}`' if s.data else 'in the section'} |")
    return "\n".join(lines) + "\n"


def render(name: str, found: dict[str, str]) -> str:
    page = PAGES[name]
    parts = [head(page)]
    for s in page.sections:
        if s.key in found:
            parts.append(f"{BEGIN.format(s.key)}\n{found[s.key]}{END.format(s.key)}\n")
    return "\n".join(parts)


def write_section(name: str, key: str, text: str, reports: Path = REPORTS) -> Path:
    """Write ``text`` (a bench's rendering, ``# title`` first) as section ``key`` of page ``name``
    under ``reports``; returns the page's path."""
    if key not in {s.key for s in PAGES[name].sections}:
        raise ValueError(f"page {name} has no section {key!r}: add it to bench/report.py's PAGES")
    path = reports / name
    found = sections(path.read_text(encoding="utf-8")) if path.exists() else {}
    found[key] = demoted(text.rstrip("\n") + "\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, render(name, found).encode("utf-8"))
    return path


def publish(text: str, name: str, key: str, output: Path | str | None = None) -> Path:
    """Write a bench's rendering: as section ``key`` of report page ``name``, or, with ``output``, as a
    page of its own there."""
    if output is None:
        return write_section(name, key, text)
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, text.encode("utf-8"))
    return path
