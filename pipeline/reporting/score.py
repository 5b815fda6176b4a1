"""`make score`'s summary: the corpus values of one results line (every metric of the registry,
``pipeline.metric_registry``), the grid, what was checked of the artifact, the wall time and where the
line went."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.definition import no_key_reason
from pipeline.formats import fmt
from pipeline.metric_registry import metrics

# The metrics whose lines below say what they are over; any other metric gets a line of its own.
OWN_LINES = ("ppl", "longppl", "longppl_soft", "bpb", "key_bpb")


def summary(row: dict[str, Any], path: Path | None) -> str:
    """The lines `make score` prints for its results line ``row`` (appended to ``path``)."""
    c = row["corpus"]
    coverage = "n/a" if c["key_char_coverage"] is None else f"{100 * c['key_char_coverage']:.1f}%"
    grid = ", ".join(f"{k}: {fmt(v['longppl'])} ({v['n_key_tokens']})" for k, v in c["grid"].items())
    checked = "; ".join(f"{k}: {v}" for k, v in sorted(row["artifact"]["checked"].items()))
    text = [
        f"model         {row['model_name']}  (artifact {row['artifact']['name']})",
        f"PPL           {fmt(c['ppl'])}   over {c['n_tokens']} tokens in {c['n_documents']} documents"
        + (f" ({c['n_truncated']} truncated)" if c["n_truncated"] else ""),
        f"LongPPL       {fmt(c['longppl'])}   over {c['n_key_tokens']} key tokens "
        f"({coverage} of key characters){no_key_note(row)}",
        f"LongPPL-soft  {fmt(c['longppl_soft'])}{unavailable_note(c, 'longppl_soft')}",
        f"bits/byte     {fmt(c['bpb'])} over {c['n_bytes']} bytes, {fmt(c['key_bpb'])} over "
        f"{c['n_key_bytes']} bytes of key tokens",
        *(
            f"{m.label:<13} {fmt(c.get(m.name))}{unavailable_note(c, m.name)}"
            for m in metrics()
            if m.name not in OWN_LINES
        ),
        f"grid          {grid or 'n/a'}{unavailable_note(c, 'grid')}",
        f"artifact      discrete {row['artifact']['identity']['discrete'][:12]}, contents "
        f"{row['artifact']['contents'][:12]}; {checked}",
        f"wall time     {row['wall_seconds']:.0f} s",
        f"appended to   {path}",
    ]
    return "\n".join(text)


def no_key_note(row: dict[str, Any]) -> str:
    """Why LongPPL is n/a, when no token is key."""
    if row["corpus"]["n_key_tokens"]:
        return ""
    art = row["artifact"]
    if art["beta"] >= 0:
        return f"\n              no key token: the artifact's {no_key_reason(art['alpha'], art['beta'])}"
    return "\n              no key token: none of this model's tokens lies inside a key span of the artifact"


def unavailable_note(corpus: dict[str, Any], metric: str) -> str:
    reason = (corpus.get("unavailable") or {}).get(metric)
    return f"  ({reason})" if reason else ""
