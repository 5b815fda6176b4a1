"""The key-token page (as the paper's Appendix E): a document with its key tokens highlighted,
every token's LSD and LCL on hover, and its diagnostics row (``pipeline.reporting.diagnostics``); and an
index of all documents of an artifact, with their key-token counts, key ratio and mean positive LSD,
linking to the pages (`make show`; the keytokens stage writes them all).

Pages live in the artifact's own directory, ``<artifact>/views/``: ``index.html`` and one
``<document>.html`` per document, its file name made from the document id (``page_name``: unsafe
characters replaced and a hash added, so that any id stays inside that folder and no two collide).
Every page carries `make show`'s mark (``pipeline.marks.generator_meta``); ``out=`` replaces only a page
that carries it (``PAGES``), and ``views/`` holds pages only (``VIEWS``).
"""

from __future__ import annotations

import hashlib
import html
import re
from pathlib import Path
from typing import Any

import numpy as np
import pydantic.dataclasses

from pipeline.artifact.columns import artifact_columns, table_columns
from pipeline.artifact.reader import load_artifact
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.files import write_bytes_atomic
from pipeline.formats import fmt
from pipeline.marks import generator_meta, page
from pipeline.outputs import Checked, FolderKind, Output, check
from pipeline.reporting.diagnostics import INDEX as INDEX_COLUMNS
from pipeline.reporting.diagnostics import header_cells, page_table, shown
from pipeline.settings import Text

VIEWS = "views"
INDEX = "index.html"
PAGES = page("show")  # what out= may replace: a page `make show` wrote
HEAD = f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">{generator_meta("show")}'

STYLE = """
body { font: 15px/1.6 Georgia, serif; max-width: 56em; margin: 2em auto; color: #222; }
header { font: 13px/1.5 system-ui, sans-serif; color: #555; border-bottom: 1px solid #ddd;
         margin-bottom: 1em; }
.text { white-space: pre-wrap; }
.key { background: rgba(230, 80, 40, var(--w)); border-radius: 2px; }
.key:hover, .tok:hover { outline: 1px solid #888; }
table.diagnostics { border-collapse: collapse; margin-top: 0.3em; }
.diagnostics th, .diagnostics td { padding: 0 8px; text-align: right; font-weight: normal; }
.diagnostics th { color: #777; }
"""


def document_html(artifact: str | Path | KeyTokenArtifact, doc_id: str | None = None) -> str:
    """The page for one document of an artifact (the first one when ``doc_id`` is None)."""
    art = artifact if isinstance(artifact, KeyTokenArtifact) else load_artifact(artifact)
    if art.tokens is None:
        raise PipelineError(
            f"the key-token page shows every token's LSD; {art.root.name} is a key_spans artifact (key spans "
            "only): read its spans.parquet instead"
        )
    ids = art.documents["doc_id"].to_pylist()
    doc_id = doc_id or ids[0]
    if doc_id not in ids:
        raise PipelineError(f"no document '{doc_id}' in {art.root} (documents: {', '.join(ids[:5])}, ...)")
    text = art.texts()[doc_id]
    mask = art.tokens["doc_id"].to_numpy(zero_copy_only=False) == doc_id
    tokens = art.tokens.filter(mask)
    rows = tokens.to_pylist()
    s = art.settings
    pieces, cursor = [], 0
    for row in rows:
        start, end = row["char_start"], row["char_end"]
        if start < cursor or start == end:  # characters shared with the previous token: shown once
            continue
        pieces.append(html.escape(text[cursor:start]))
        title = f"LSD {fmt(row['lsd'], '.3f', 'none')}, LCL {fmt(row['long_logprob'], '.3f', 'none')}"
        piece = html.escape(text[start:end])
        if row["is_key"]:
            weight = min(1.0, 0.25 + 0.75 * min(row["lsd"], 8.0) / 8.0)
            pieces.append(f'<span class="key" style="--w:{weight:.2f}" title="{title}">{piece}</span>')
        else:
            pieces.append(f'<span class="tok" title="{title}">{piece}</span>')
        cursor = end
    pieces.append(html.escape(text[cursor:]))
    n_key = sum(r["is_key"] for r in rows)
    header = (
        f"<b>{html.escape(doc_id)}</b> from <code>{html.escape(art.root.name)}</code> &middot; "
        f"{definition_html(s)} &middot; {n_key} key tokens of {len(rows)} "
        "(highlighted; darker = larger LSD; hover any token for its LSD and LCL)"
        + page_table(table_columns(tokens, s))
    )
    return (
        f"{HEAD}<title>Key tokens: {html.escape(doc_id)}</title><style>{STYLE}</style></head>\n"
        f"<body><header>{header}</header>\n"
        f'<div class="text">{"".join(pieces)}</div>\n</body></html>\n'
    )


def definition_html(settings: dict[str, Any]) -> str:
    """The evaluator and the key-token definition, escaped (the manifest is the artifact's, not ours)."""
    values = ", ".join(f"{k}={html.escape(str(settings[k]))}" for k in ("K", "d", "alpha", "beta"))
    return f"evaluator <code>{html.escape(str(settings['evaluator']['spec']))}</code>, {values}"


def views_dir(artifact_dir: str | Path) -> Path:
    """``<artifact>/views``: the pages of an artifact, inside it."""
    return Path(artifact_dir) / VIEWS


def page_name(doc_id: str) -> str:
    """A document's page file name: its id when that is a plain file name, else the id with unsafe
    characters replaced, shortened, and a hash of the id added (no two ids share a name, no name
    leaves the folder or takes the index's)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", doc_id).strip("._-")[:80]
    if safe != doc_id or safe.lower() == INDEX.removesuffix(".html"):
        safe = f"{safe or 'document'}-{hashlib.sha256(doc_id.encode()).hexdigest()[:12]}"
    return f"{safe}.html"


def write_page(
    artifact_dir: str | Path, out: str | Path, doc_id: str | None = None, checked: Checked | None = None
) -> Path:
    """One document's page at ``out`` (where ``checked`` found it, when given: ``pipeline.outputs``)."""
    out = Path(out)
    write_bytes_atomic(out, document_html(artifact_dir, doc_id).encode("utf-8"), checked)
    return out


def views_problem(folder: Path) -> str | None:
    """Why ``folder`` is no artifact's ``views/`` folder: the first file in it that is no page (an
    interrupted write's temporary file aside); None when there is none."""
    for entry in sorted(folder.iterdir()):
        temporary = entry.name.startswith(".") and entry.name.endswith(".tmp")
        if not temporary and (entry.suffix != ".html" or entry.is_symlink() or not entry.is_file()):
            return (
                f"a folder that holds {entry.name}, which is no key-token page (remove it, or write one page "
                "elsewhere with out=<file>)"
            )
    return None


VIEWS_FOLDER = FolderKind(
    "an artifact's views/ folder (pages only)", "`make show`", views_problem, in_artifact=True
)


def index_html(art: KeyTokenArtifact, pages: set[str]) -> str:
    """All documents of the artifact, their token, key-token and span counts, key ratio and mean
    positive LSD, linked to their pages (those in ``pages``; the others name the command that writes
    them)."""
    s, docs = art.settings, art.documents.to_pylist()
    columns = artifact_columns(art) if art.has_token_values else {}
    rows = []
    for d in docs:
        name = page_name(d["doc_id"])
        label = html.escape(d["doc_id"])
        cell = f'<a href="{html.escape(name)}">{label}</a>' if name in pages else label
        share = 100 * d["n_key_tokens"] / d["n_tokens"] if d["n_tokens"] else 0.0
        rows.append(
            f"<tr><td>{cell}</td><td>{d['n_tokens']}</td><td>{d['n_key_tokens']}</td><td>{share:.2f}%</td>"
            f"<td>{d['n_spans']}</td><td>{'yes' if d['truncated'] else ''}</td>"
            + "".join(f"<td>{shown(n, columns.get(d['doc_id'], {}).get(n))}</td>" for n in INDEX_COLUMNS)
            + "</tr>"
        )
    n_key = int(np.asarray(art.documents["n_key_tokens"]).sum())
    header = (
        f"<b>{html.escape(art.root.name)}</b> &middot; {len(docs)} documents, {n_key} key tokens &middot; "
        + definition_html(s)
    )
    if len(pages) < len(docs):
        header += (
            " &middot; a document without a link: <code>make show ARGS=&quot;doc_id=&lt;id&gt;&quot;</code>"
        )
    return (
        f"{HEAD}<title>Key tokens: {html.escape(art.root.name)}</title>"
        f"<style>{STYLE}{INDEX_STYLE}</style></head>\n"
        f"<body><header>{header}</header>\n<table><tr><th>document</th><th>tokens</th><th>key tokens</th>"
        f"<th>key share</th><th>spans</th><th>truncated</th>{header_cells(INDEX_COLUMNS)}</tr>\n"
        + "\n".join(rows)
        + "\n</table>\n</body></html>\n"
    )


INDEX_STYLE = """
table { border-collapse: collapse; font: 14px/1.5 system-ui, sans-serif; }
th, td { padding: 2px 12px; text-align: right; border-bottom: 1px solid #eee; }
th:first-child, td:first-child { text-align: left; }
"""


def write_views(artifact: str | Path | KeyTokenArtifact, doc_ids: list[str] | None = None) -> Path:
    """The pages of ``doc_ids`` (None: every document) and the index, in ``<artifact>/views``;
    returns the index's path."""
    art = artifact if isinstance(artifact, KeyTokenArtifact) else load_artifact(artifact)
    out = views_dir(art.root)
    ids = art.documents["doc_id"].to_pylist() if doc_ids is None else doc_ids
    refuse_links([out, out / INDEX, *(out / page_name(doc_id) for doc_id in ids)])
    check(Output("views", out, VIEWS_FOLDER))
    for doc_id in ids:
        write_bytes_atomic(out / page_name(doc_id), document_html(art, doc_id).encode("utf-8"))
    pages = {p.name for p in out.glob("*.html")} - {INDEX}
    write_bytes_atomic(out / INDEX, index_html(art, pages).encode("utf-8"))
    return out / INDEX


def refuse_links(paths: list[Path]) -> None:
    """Pages are written inside the artifact only: a symbolic link among their paths (put there to
    send them elsewhere) is an error, before anything is written."""
    link = next((p for p in paths if p.is_symlink()), None)
    if link is not None:
        raise PipelineError(
            f"{link} is a symbolic link: key-token pages are written inside the artifact only; remove the "
            f"link, or write one page elsewhere with out=<file>"
        )


@pydantic.dataclasses.dataclass(frozen=True)
class ShowOptions:
    """`make show`'s settings (``conf/show.yaml``)."""

    artifact: str
    doc_id: Text | None = None  # None: the first document
    all: bool = False  # every document's page
    out: str | None = None  # that one page to this file instead (no index)


def show(options: ShowOptions) -> list[Path]:
    """``out`` given: that one page there. Otherwise into ``<artifact>/views``: the page of ``doc_id``
    (null: the first document; ``all=true``: every document) and the index. The paths written, the
    page last."""
    artifact = Path(options.artifact)
    if options.out:
        checked = check(Output("out", Path(options.out), PAGES))
        return [write_page(artifact, checked.path, options.doc_id, checked)]
    art = load_artifact(artifact)
    doc_id = options.doc_id or art.documents["doc_id"][0].as_py()
    index = write_views(art, None if options.all else [doc_id])
    return [index, index.parent / page_name(doc_id)]
