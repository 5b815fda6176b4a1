"""The README's picture: an excerpt of a key-token page (`make show` writes them, <artifact>/views/)
rendered by headless Chromium.

    python3 docs/reports/images/keytokens_excerpt.py \
        artifacts/keytokens/govreport_sample--gemma3-270m--K1024-d1024-max4096/views/govreport-09.html

keeps the page's header and style and the evaluator tokens [start, start + count) of its text (the
defaults: 19 of govreport-09's 23 key tokens), then writes docs/reports/images/keytokens-govreport-09.png.
Standard library only; needs `chromium` (or set CHROMIUM)."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
from pathlib import Path

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1200,580",
]


def excerpt(page: str, start: int, count: int) -> str:
    """The page with its text cut to the tokens [start, start + count), marked [...] at both ends."""
    i = page.index('<div class="text">') + len('<div class="text">')
    j = page.index("</div>", i)
    spans = re.findall(r'<span class="(?:tok|key)"[^>]*>.*?</span>', page[i:j], re.S)
    mark = '<span style="color:#999">[\u2026]</span>'
    return page[:i] + mark + "".join(spans[start : start + count]) + " " + mark + page[j:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path)
    parser.add_argument("--start", type=int, default=3259)
    parser.add_argument("--count", type=int, default=330)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("keytokens-govreport-09.png"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "excerpt.html"
        html.write_text(excerpt(args.page.read_text(encoding="utf-8"), args.start, args.count), "utf-8")
        chromium = os.environ.get("CHROMIUM", "chromium")
        profile = f"--user-data-dir={tmp}/profile"
        shot = f"--screenshot={args.out.resolve()}"
        subprocess.run([chromium, *FLAGS, profile, shot, html.as_uri()], check=True)


if __name__ == "__main__":
    main()
