"""The key-token page (as the paper's Appendix E): a document with its key tokens highlighted,
every token's LSD and LCL on hover (`make show`; the keytokens stage writes one per run).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from pipeline.artifacts import load_artifact
from pipeline.cli import hydra_main
from pipeline.errors import PipelineError
from pipeline.files import write_bytes_atomic
from pipeline.reporting.common import fmt

STYLE = """
body { font: 15px/1.6 Georgia, serif; max-width: 56em; margin: 2em auto; color: #222; }
header { font: 13px/1.5 system-ui, sans-serif; color: #555; border-bottom: 1px solid #ddd;
         margin-bottom: 1em; }
.text { white-space: pre-wrap; }
.key { background: rgba(230, 80, 40, var(--w)); border-radius: 2px; }
.key:hover, .tok:hover { outline: 1px solid #888; }
"""


def document_html(artifact_dir: str | Path, doc_id: str | None = None) -> str:
    """The page for one document of an artifact (the first one when ``doc_id`` is None)."""
    art = load_artifact(artifact_dir)
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
    rows = art.tokens.filter(mask).to_pylist()
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
        f"<b>{html.escape(doc_id)}</b> from <code>{html.escape(art.root.name)}</code> &middot; evaluator "
        f"<code>{html.escape(str(s['evaluator']['spec']))}</code>, K={s['K']}, d={s['d']}, "
        f"alpha={s['alpha']}, beta={s['beta']} &middot; {n_key} key tokens of {len(rows)} "
        "(highlighted; darker = larger LSD; hover any token for its LSD and LCL)"
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>Key tokens: {html.escape(doc_id)}</title><style>{STYLE}</style></head>\n"
        f"<body><header>{header}</header>\n"
        f'<div class="text">{"".join(pieces)}</div>\n</body></html>\n'
    )


def default_path(artifact_dir: Path, doc_id: str | None) -> Path:
    """``artifacts/views/<artifact>/<document>.html``, beside (not inside) the artifact."""
    doc = doc_id or load_artifact(artifact_dir, verify_hashes=False).documents["doc_id"][0].as_py()
    return artifact_dir.parent.parent / "views" / artifact_dir.name / f"{doc}.html"


def write_page(artifact_dir: str | Path, out: str | Path, doc_id: str | None = None) -> Path:
    out = Path(out)
    write_bytes_atomic(out, document_html(artifact_dir, doc_id).encode("utf-8"))
    return out


def run(cfg: Any) -> Path:
    artifact = Path(cfg.artifact)
    out = Path(cfg.out) if cfg.out else default_path(artifact, cfg.doc_id)
    path = write_page(artifact, out, cfg.doc_id)
    print(f"wrote {path}")
    return path


def main() -> None:
    hydra_main("show", run)


if __name__ == "__main__":
    main()
