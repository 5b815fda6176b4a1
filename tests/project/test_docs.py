"""The README and the manual in docs/: a README a newcomer reads in one sitting, a manual that lost
nothing when the README's chapters moved into it, and links that lead somewhere.

- the README has at most 250 lines, and no placeholder (``<UPPER_CASE>``) left unfilled;
- every target of the Makefile (its .PHONY list) is documented: ``make <target>`` in the README or a
  docs page, and listed by ``make help``;
- every make target and config key that the README named before it moved into docs/ (frozen below)
  is still documented somewhere;
- every relative link and picture of the README and docs/**/*.md (the manual and the reports under
  docs/reports/) points at a file that exists (and, for a Markdown page with ``#anchor``, at one of its
  headings);
- every topic page of the manual starts with what it is for and the command that does it;
- no page names a path of one machine (``/work/...``, ``/root/...``, ``/home/...``, ``/Users/...``,
  ``../shared/...``): the README and docs/**/*.md;
- the manual (the README and docs/*.md; not the reports in docs/reports/, which keep the command,
  commit, machine and date of their numbers) carries dates and commits only inside tables:
  outside table rows (lines that start with ``|``), no date ``YYYY-MM-DD`` at all, and no commit hash
  (a word of 7 to 40 lowercase hex digits with at least one digit and one letter) in the prose, that
  is outside table rows, fenced blocks and inline code (inline code holds identifiers a reader types
  or compares: a pinned revision, an artifact's identity)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.support import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 250

# Extracted once from the README at 8f60266 (`git show 8f60266:README.md`), before its chapters moved
# into docs/: every `make <target>` that is a target of the Makefile, and every backticked or
# shell-block `key`, `key=value` or `key:` whose last part is a key of a conf/**/*.yaml file.
OLD_README_TARGETS = [
    "bench", "bench-attention", "bench-checks", "bench-dropin", "bench-forgetting", "bench-head",
    "bench-ladder", "bench-lmeval", "bench-longce", "bench-memory", "bench-quick", "bench-stage2",
    "finetune", "forgetting-curve", "import-official", "import-official-all", "keytokens", "ladder",
    "leaderboard", "leaderboard-refresh", "leaderboard-refresh-official", "lm-eval", "longce-demo",
    "publish", "rehearse-paper", "score", "setup-lmeval", "show", "test", "test-gpu", "validate",
]  # fmt: skip
OLD_README_KEYS = [
    "K", "R", "account", "add_bos", "aggregate", "all", "allow_truncation", "alpha", "array_parallelism",
    "artifact", "attn_implementation", "beta", "beyond_context", "bootstrap", "bos_id", "cache_dir",
    "checkpoints", "confidence", "config", "context", "context_limit", "corpus", "corpus.dataset",
    "corpus.id_field", "corpus.path", "corpus.text_field", "corpus.tokenized_with", "d",
    "default_artifact", "device", "device_map", "doc_id", "documents", "dtype", "eos_id",
    "eval_documents", "evaluator", "evaluator.spec", "expected", "forgetting_results", "gamma",
    "govreport_documents", "grid", "head_chunk", "head_dtype", "hydra.launcher.gpus_per_node",
    "hydra.launcher.partition", "hydra.launcher.setup", "hydra.launcher.timeout_min", "hydra.sweep.dir",
    "ladder", "ladder_results", "launcher", "launcher_args", "lines", "lmeval_results", "longppl",
    "max_input", "max_length", "max_tokens", "mem_gb", "min_boundary_share", "min_length", "min_tokens",
    "model", "model.attn_implementation", "model.revision", "n", "name", "num_documents",
    "official.tokenizer", "output_dir", "plot_dir", "ppl", "preset", "qos", "results", "revision", "run",
    "seed", "settings", "short_window_bos", "source", "steps", "tokenizer", "tolerance",
    "train_documents", "training.bf16", "training.deepspeed", "training.gradient_accumulation_steps",
    "training.max_steps", "trust_remote_code", "vocab_tile", "window_batch_tokens",
]  # fmt: skip
# Targets renamed since, by their new names (each bench target is named after its case).
RENAMED_TARGETS = {"bench-memory": "bench-stage1", "bench-dropin": "bench-official"}

# The manual's topic pages (written by hand; the reports that commands write, in docs/reports/, are
# not): each starts with what it is for, then its command.
TOPIC_PAGES = [
    "configuration.md", "outputs.md", "api.md", "lm-eval.md", "gpu.md", "hub.md", "leaderboards.md",
    "forgetting.md", "ladder.md", "long.md", "finetune.md", "validate.md", "bench.md", "guarantees.md",
    "architecture.md",
]  # fmt: skip

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def pages() -> dict[str, str]:
    """The README and every docs/**/*.md page, by path relative to the repository root."""
    found = {"README.md": README.read_text(encoding="utf-8")}
    for page in sorted(DOCS.rglob("*.md")):
        found[str(page.relative_to(ROOT))] = page.read_text(encoding="utf-8")
    return found


def code_pieces(text: str) -> list[str]:
    """The inline code spans (outside fenced blocks; a span may wrap a line) and the fenced blocks."""
    fences = [m.group(0) for m in FENCE.finditer(text)]
    inline = [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", FENCE.sub("", text))]
    return inline + fences


def phony_targets() -> list[str]:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    return re.search(r"^\.PHONY:(.*)$", makefile, re.M).group(1).split()


def undocumented_targets(text: str, targets: list[str]) -> list[str]:
    return [t for t in targets if not re.search(rf"\bmake\s+{re.escape(t)}(?![\w-])", text)]


def undocumented_keys(texts: list[str], keys: list[str]) -> list[str]:
    pieces = [piece for text in texts for piece in code_pieces(text)]
    return [
        k for k in keys if not any(re.search(rf"(?<![\w.]){re.escape(k)}(?!\w)", piece) for piece in pieces)
    ]


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    return {slug(h) for h in re.findall(r"^#+ (.+)$", FENCE.sub("", text), re.M)}


def broken_links(found: dict[str, str]) -> list[str]:
    broken = []
    for name, text in found.items():
        folder = (ROOT / name).parent
        for target in LINK.findall(FENCE.sub("", text)):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (folder / path).resolve() if path else ROOT / name
            if not file.exists():
                broken.append(f"{name}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text(encoding="utf-8")):
                broken.append(f"{name}: {target} (no such heading)")
    return broken


MACHINE_PATH = re.compile(r"(?<![\w.])(?:/work/|/root/|/home/|/Users/)|(?<![\w.])\.\./shared/")
DATE = re.compile(r"(?<!\d)\d{4}-\d\d-\d\d(?!\d)")
COMMIT = re.compile(r"(?<![\w./-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w-])")


def machine_paths(found: dict[str, str]) -> list[str]:
    return [
        f"{name}:{n}: {m.group(0)}"
        for name, text in found.items()
        for n, line in enumerate(text.splitlines(), 1)
        for m in MACHINE_PATH.finditer(line)
    ]


def dated_prose(name: str, text: str) -> list[str]:
    """Dates outside table rows, and commit hashes outside table rows, fenced blocks and inline code,
    as ``page:line: match``."""
    blanked = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)  # keeps the line numbers
    prose = re.sub(r"`[^`]+`", lambda m: re.sub(r"[^\n]", " ", m.group(0)), blanked)
    found = [f"{name}:{n}: {m.group(0)}" for n, line in outside_tables(text) for m in DATE.finditer(line)]
    return found + [
        f"{name}:{n}: {m.group(0)}" for n, line in outside_tables(prose) for m in COMMIT.finditer(line)
    ]


def outside_tables(text: str) -> list[tuple[int, str]]:
    """The lines that are not table rows, with their numbers."""
    return [(n, line) for n, line in enumerate(text.splitlines(), 1) if not line.lstrip().startswith("|")]


def manual_pages() -> dict[str, str]:
    """The manual: the README and docs/*.md (the reports in docs/reports/ are not)."""
    return {name: text for name, text in pages().items() if "/reports/" not in name}


def test_the_readme_fits_in_one_sitting():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines (at most {MAX_README_LINES})"


def unfilled_placeholders(text: str) -> list[str]:
    """``<UPPER_CASE>`` markers left for a measured value (``<name>``, a user's own value, is not one)."""
    return re.findall(r"<[A-Z][A-Z0-9_]+>", text)


def test_the_readme_has_no_placeholder_left_unfilled():
    assert unfilled_placeholders("make keytokens <KEYTOKENS_TIME>; <name>") == ["<KEYTOKENS_TIME>"]
    assert unfilled_placeholders(README.read_text(encoding="utf-8")) == []


def test_every_make_target_is_documented():
    text = "\n".join(pages().values())
    assert not undocumented_targets(text, phony_targets()), undocumented_targets(text, phony_targets())


def test_nothing_the_old_readme_named_was_lost():
    found = pages()
    text = "\n".join(found.values())
    targets = [RENAMED_TARGETS.get(t, t) for t in OLD_README_TARGETS]
    assert not undocumented_targets(text, targets), undocumented_targets(text, targets)
    missing = undocumented_keys(list(found.values()), OLD_README_KEYS)
    assert not missing, f"config keys the README named and no page documents now: {missing}"


def test_every_relative_link_leads_somewhere():
    broken = broken_links(pages())
    assert not broken, broken


def test_no_page_names_a_path_of_one_machine():
    assert not machine_paths(pages()), machine_paths(pages())


def test_the_manual_dates_its_numbers_only_in_tables():
    found = [hit for name, text in manual_pages().items() for hit in dated_prose(name, text)]
    assert not found, f"dates or commits in the manual's prose (move them into a table or a report): {found}"


def test_every_topic_page_starts_with_its_purpose_and_its_command():
    late = []
    for name in TOPIC_PAGES:
        head = "\n".join((DOCS / name).read_text(encoding="utf-8").splitlines()[:25])
        if (
            not head.startswith("# ")
            or "What this page is for" not in head
            or not re.search(r"```(sh|python)\n", head)
        ):
            late.append(name)
    assert not late, f"pages without a title, their purpose and their command in the first 25 lines: {late}"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_help_lists_every_target_in_its_group():
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    groups = [line for line in out.splitlines() if line and not line.startswith(" ")]
    assert [g.split(" (")[0] for g in groups] == [
        "The two stages",
        "Reports",
        "Studies",
        "Benches",
        "Setup and checks",
    ], groups
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    assert sorted(listed) == sorted(phony_targets()), set(listed) ^ set(phony_targets())


def test_the_checks_fail_when_something_is_dropped():
    """The checks above can fail: a page without `make bench-ladder`, a key or a link's target."""
    text = "`make bench-ladders` and `make\n  score`; make lm-eval"
    assert undocumented_targets(text, ["bench-ladder", "score", "lm-eval"]) == ["bench-ladder"]
    assert undocumented_keys(["`min_boundary_sharing`"], ["min_boundary_share"]) == ["min_boundary_share"]
    assert broken_links({"README.md": "[gone](docs/no-such-page.md)"}) == [
        "README.md: docs/no-such-page.md (no such file)"
    ]
    assert broken_links({"README.md": "[gone](docs/gpu.md#no-such-heading)"}) == [
        "README.md: docs/gpu.md#no-such-heading (no such heading)"
    ]
    assert machine_paths({"a.md": "see /work/main/x and ../shared/data, not docs/work/x"}) == [
        "a.md:1: /work/",
        "a.md:1: ../shared/",
    ]
    page = "Measured (c5c531d, 2026-11-24).\n| run | a1b2c3d | 2026-11-24 |\n`fingerprint 9bb93536f3b2`\n"
    page += "```\nidentity aba26b06505a\n```\nfloat16, 1e-3, deadbeef, `make x` of 2026-11-25"
    assert dated_prose("p.md", page) == ["p.md:1: 2026-11-24", "p.md:7: 2026-11-25", "p.md:1: c5c531d"]
