"""Stage 2: a causal LM scored against a key-token artifact: PPL, LongPPL, LongPPL-soft.

``longppl score [key=value ...]`` (`make score MODEL=...`; Hydra overrides of ``conf/score.yaml``): the
result appended to the results file. Needs no corpus and no evaluator: the texts, spans and LSD come
from the artifact.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from pipeline.artifact.reader import open_artifact
from pipeline.commands.shell import hydra_main, plain
from pipeline.definition import no_key_reason
from pipeline.formats import fmt
from pipeline.hub import is_hub_dataset, offline_unless
from pipeline.models.loading import ModelChoice, is_local_model
from pipeline.results import lines
from pipeline.results.keys import context_name
from pipeline.results.score import score_row
from pipeline.score.engine import score
from pipeline.settings import Compute, ScoreSettings, parse


def run(cfg: Any) -> dict[str, Any]:
    """Score one model; append the result line to the results file and return it."""
    started = time.time()
    values = plain(cfg)
    choice = ModelChoice.parse(values["model"])
    settings, compute = parse(ScoreSettings, values), parse(Compute, values)
    path = lines.check_writable(Path(str(cfg.results)))  # before any scoring: nothing is lost
    offline_unless(is_hub_dataset(cfg.artifact), not is_local_model(choice.spec))
    choice.check()
    artifact = open_artifact(str(cfg.artifact))
    lm = choice.load(compute)
    result = score(artifact, lm, settings, compute, progress=bool(cfg.progress))
    name = context_name(choice.display_name, settings.context_limit)  # one @ctx<N>, the one used
    row = score_row(name, lm, result, time.time() - started)
    lines.append(path, row)
    print_result(row, path)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return row


def print_result(row: dict[str, Any], path: Path) -> None:
    c = row["corpus"]
    coverage = "n/a" if c["key_char_coverage"] is None else f"{100 * c['key_char_coverage']:.1f}%"
    text = [
        f"model         {row['model_name']}  (artifact {row['artifact']['name']})",
        f"PPL           {fmt(c['ppl'])}   over {c['n_tokens']} tokens in {c['n_documents']} documents"
        + (f" ({c['n_truncated']} truncated)" if c["n_truncated"] else ""),
        f"LongPPL       {fmt(c['longppl'])}   over {c['n_key_tokens']} key tokens "
        f"({coverage} of key characters){no_key_note(row)}",
        f"LongPPL-soft  {fmt(c['longppl_soft'])}{unavailable_note(c, 'longppl_soft')}",
        f"bits/byte     {fmt(c['bpb'])} over {c['n_bytes']} bytes, {fmt(c['key_bpb'])} over "
        f"{c['n_key_bytes']} bytes of key tokens",
        "grid          "
        + (
            ", ".join(f"{k}: {fmt(v['longppl'])} ({v['n_key_tokens']})" for k, v in c["grid"].items())
            or "n/a"
        )
        + unavailable_note(c, "grid"),
        f"artifact      discrete {row['artifact']['identity']['discrete'][:12]}, contents "
        f"{row['artifact']['contents'][:12]}; "
        + "; ".join(f"{k}: {v}" for k, v in sorted(row["artifact"]["checked"].items())),
        f"wall time     {row['wall_seconds']:.0f} s",
        f"appended to   {path}",
    ]
    print("\n".join(text))


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


def main() -> None:
    hydra_main("score", run)


if __name__ == "__main__":
    main()
