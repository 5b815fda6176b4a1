"""The report pages the benchmarks write (``bench/report.py``): one page per subject under
docs/reports/, each bench's section rewritten alone, the others kept; every committed page is what its
sections render to, with its head naming each section's command."""

from __future__ import annotations

import pytest

from bench import report
from tests.support import ROOT

ATTENTION = "# Peak memory of attention\n\nRegenerate: `make bench-attention`.\n\n```sh\n# a comment\n```\n"


def test_a_section_is_written_alone_in_its_place(tmp_path):
    report.write_section("memory.md", "long", "# Long\n\n## Table\n\n| a |\n", tmp_path)
    page = report.write_section("memory.md", "attention", ATTENTION, tmp_path)
    text = page.read_text()
    assert text.startswith("# Peak memory of attention and of both stages")
    assert text.index("## Peak memory of attention\n") < text.index("## Long\n") < text.index("### Table")
    assert "# a comment" in text and "## a comment" not in text  # fenced code is kept as it is
    report.write_section("memory.md", "attention", "# Attention again\n", tmp_path)
    expected = {"attention": "## Attention again\n", "long": "## Long\n\n### Table\n\n| a |\n"}
    assert report.sections(page.read_text()) == expected


def test_an_unknown_section_or_page_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=r"page memory\.md has no section 'nope'"):
        report.write_section("memory.md", "nope", ATTENTION, tmp_path)
    with pytest.raises(KeyError):
        report.write_section("nowhere.md", "long", ATTENTION, tmp_path)


@pytest.mark.parametrize("name", sorted(report.PAGES))
def test_each_committed_page_renders_from_its_sections(name):
    text = (ROOT / "docs" / "reports" / name).read_text(encoding="utf-8")
    found = report.sections(text)
    assert list(found) == [s.key for s in report.PAGES[name].sections]
    assert report.render(name, found) == text
    for s in report.PAGES[name].sections:
        assert f"`{s.command}`" in text
