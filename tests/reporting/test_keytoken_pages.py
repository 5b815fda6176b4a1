"""The key-token pages (`make show`) and the dataset card: whatever the manifest holds is escaped, and
pages are written only inside the artifact, never through a symbolic link. (The pages in a real
browser: tests/reporting/test_keytoken_page_browser.py.)"""

from __future__ import annotations

import json

import pytest

from pipeline.artifact.reader import load_artifact
from pipeline.errors import PipelineError
from pipeline.reporting import keytoken_page
from pipeline.sharing import hub_dataset as publish
from tests.support import cli, craft, error_lines


def test_pages_and_card_escape_the_manifest(tiny_artifact, tmp_path):
    """The type checks refuse a string K on load; whatever reaches a page or a card is escaped anyway."""
    art = load_artifact(tiny_artifact)
    art.manifest = json.loads(json.dumps(art.manifest))
    art.settings["K"] = "<img src=x onerror=alert(1)>"
    art.settings["evaluator"]["spec"] = "<script>x</script>"
    page = keytoken_page.document_html(art) + keytoken_page.index_html(art, set())
    assert "<img" not in page and "<script>" not in page and "&lt;img src=x" in page
    card = publish.dataset_card(art, "org/name", "cc-by-4.0")
    body = card.split("---", 2)[2]
    assert "`K=<img src=x onerror=alert(1)>, " in body and "`<script>x</script>`" in body
    assert body.replace("`K=<img src=x onerror=alert(1)>, ", "").count("<img") == 0


@pytest.mark.parametrize("link", ["views", "page"])
def test_pages_never_follow_a_link_out_of_the_artifact(tiny_artifact, tmp_path, link):
    root = craft(tiny_artifact, tmp_path / "art")
    outside = tmp_path / "outside"
    outside.mkdir()
    if link == "views":
        (root / "views").symlink_to(outside, target_is_directory=True)
    else:
        (root / "views").mkdir()
        (root / "views" / "doc-1.html").symlink_to(outside / "x.html")
    with pytest.raises(
        PipelineError, match=r"is a symbolic link: key-token pages are written inside the artifact"
    ):
        keytoken_page.write_views(root)
    assert not list(outside.iterdir())


def test_show_never_writes_through_a_link(tiny_artifact, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    views = craft(tiny_artifact, tmp_path / "views-link")
    (views / "views").symlink_to(outside, target_is_directory=True)
    page = craft(tiny_artifact, tmp_path / "page-link")
    (page / "views").mkdir()
    (page / "views" / "index.html").symlink_to(outside / "index.html")
    done = cli(
        "pipeline.commands.show", "--multirun", f"artifact={views},{page}", "all=true",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )  # fmt: skip
    lines = error_lines(done.stderr)
    assert len(lines) == 2 and all(
        "is a symbolic link: key-token pages are written inside" in x for x in lines
    )
    assert not list(outside.iterdir())
