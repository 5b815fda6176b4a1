"""The key-token page in a real browser: headless Chromium (Debian's package, which `make test` installs)
loads the page, and every key token is in the rendered page, highlighted, with its LSD on hover."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from pipeline.artifact.reader import load_artifact
from pipeline.reporting import keytoken_page

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def browser() -> str:
    """The headless browser; a missing one fails the test (it is part of the suite, not optional)."""
    for name in BROWSERS:
        if path := shutil.which(name):
            return path
    pytest.fail(
        "no Chromium found: `make test` installs it as root; otherwise run "
        "`sudo apt-get install -y --no-install-recommends chromium`"
    )


def run_browser(page: Path, profile: Path, *args: str) -> str:
    command = [browser(), "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}", *args]
    done = subprocess.run([*command, page.as_uri()], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class KeySpans(HTMLParser):
    """The text and title of every ``<span class="key">`` of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[dict[str, str]] = []
        self._open: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "span" and "key" in (a.get("class") or "").split():
            self._open = {"title": a.get("title") or "", "text": ""}

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "span" and self._open is not None:
            self.spans.append(self._open)
            self._open = None


def expected_key_tokens(artifact_dir: Path, doc_id: str) -> list[dict]:
    """The artifact's key tokens of the document, as the page shows them (a token sharing characters
    with the previous one is shown once, with that one)."""
    art = load_artifact(artifact_dir)
    text = art.texts()[doc_id]
    rows = [r for r in art.tokens.to_pylist() if r["doc_id"] == doc_id]
    shown, cursor = [], 0
    for r in rows:
        if r["char_start"] < cursor or r["char_start"] == r["char_end"]:
            continue
        cursor = r["char_end"]
        if r["is_key"]:
            shown.append({**r, "text": text[r["char_start"] : r["char_end"]]})
    return shown


def test_key_tokens_render_in_headless_chromium(tiny_artifact, tmp_path):
    page = keytoken_page.write_page(tiny_artifact, tmp_path / "view.html", "doc-0")
    expected = expected_key_tokens(tiny_artifact, "doc-0")
    assert expected, "the tiny artifact should have key tokens in doc-0"
    parser = KeySpans()
    parser.feed(run_browser(page, tmp_path / "profile", "--dump-dom"))
    assert len(parser.spans) == len(expected)
    assert [s["text"] for s in parser.spans] == [e["text"] for e in expected]
    for span, token in zip(parser.spans, expected, strict=True):
        assert span["title"].startswith(f"LSD {token['lsd']:.3f}, LCL {token['long_logprob']:.3f}")
    # and the key spans of the artifact are exactly the runs of highlighted tokens
    art = load_artifact(tiny_artifact)
    spans = [s for s in art.spans.to_pylist() if s["doc_id"] == "doc-0"]
    assert sum(s["n_tokens"] for s in spans) == len(expected)


def test_highlight_is_painted(tiny_artifact, tmp_path):
    """A screenshot of the page has the highlight colour (rgba(230, 80, 40, w) on white) in it."""
    from PIL import Image

    page = keytoken_page.write_page(tiny_artifact, tmp_path / "view.html", "doc-0")
    shot = tmp_path / "shot.png"
    run_browser(page, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1000,1400")
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=np.int32)
    r, g, b = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    highlighted = (r > g + 25) & (r > b + 25) & (g > b - 10)
    assert highlighted.sum() > 50, "no highlighted key token painted on the page"
