"""The score run (`make score MODEL=...`): one causal LM against a key-token artifact, the result
appended to the results file. Needs no corpus and no evaluator: the texts, spans and LSD come from the
artifact.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from pipeline import results
from pipeline.artifacts import HUB_PREFIX, iter_documents, load_artifact, locate_artifact
from pipeline.logprobs import TargetScorer
from pipeline.models import ModelChoice, dtype_name, is_local_model, resolve_head_dtype
from pipeline.reporting.common import fmt
from pipeline.score import ScoreSettings, corpus_summary, score_document, settings_dict, unavailable_metrics


def score_settings(cfg: Any) -> ScoreSettings:
    return ScoreSettings(
        add_bos=bool(cfg.add_bos),
        context_limit=cfg.context_limit,
        allow_truncation=bool(cfg.allow_truncation),
        grid=tuple((float(a), float(b)) for a, b in cfg.grid),
        head_chunk=int(cfg.head_chunk),
        vocab_tile=cfg.get("vocab_tile"),
        window_batch_tokens=int(cfg.window_batch_tokens),
    )


def model_name(choice: ModelChoice) -> str:
    """The leaderboard's name: the group's ``name``, else the spec (a file's stem, a directory's name)."""
    if choice.name:
        return str(choice.name)
    path = Path(choice.spec)
    return path.stem if choice.spec.endswith(".gguf") else path.name if path.is_dir() else choice.spec


def run(cfg: Any) -> dict[str, Any]:
    """Score one model; append the result line to the results file and return it."""
    started = time.time()
    choice = ModelChoice.from_config(cfg.model)
    spec = str(cfg.artifact)
    if not spec.startswith(HUB_PREFIX):
        spec = str(Path(spec).absolute())
        if is_local_model(choice.spec):
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing to download: fail fast
    artifact_path, artifact_source = locate_artifact(spec)
    artifact = load_artifact(artifact_path)
    settings = score_settings(cfg)
    lm = choice.load(dtype=cfg.dtype, device=cfg.device, cache_dir=cfg.get("cache_dir"))
    head_dtype = resolve_head_dtype(str(cfg.get("head_dtype", "model")), lm.dtype, lm.device)
    scorer = TargetScorer(
        lm.model, head_chunk=settings.head_chunk, vocab_tile=settings.vocab_tile, head_dtype=head_dtype
    )
    scorer.check_against_full_forward()
    docs = list(iter_documents(artifact))
    scores = [
        score_document(lm, scorer, doc, settings)
        for doc in tqdm(docs, desc="documents", unit="doc", disable=not cfg.progress)
    ]
    record = {
        **settings_dict(settings),
        "dtype": dtype_name(lm.dtype),
        "head_dtype": dtype_name(head_dtype),
        "device": lm.placement,
    }
    name = model_name(choice) + (f"@ctx{settings.context_limit}" if settings.context_limit else "")
    corpus, documents = corpus_summary(scores), [s.summary() for s in scores]
    if unavailable := unavailable_metrics(artifact):
        corpus["unavailable"] = unavailable  # null values, with the reason (never zeros)
    row = results.score_row(name, lm, artifact, record, corpus, documents, time.time() - started)
    row["artifact"]["source"] = artifact_source
    path = Path(str(cfg.results))
    results.append(path, row)
    print_result(row, path)
    return row


def print_result(row: dict[str, Any], path: Path) -> None:
    c = row["corpus"]
    coverage = "n/a" if c["key_char_coverage"] is None else f"{100 * c['key_char_coverage']:.1f}%"
    lines = [
        f"model         {row['model_name']}  (artifact {row['artifact']['name']})",
        f"PPL           {fmt(c['ppl'])}   over {c['n_tokens']} tokens in {c['n_documents']} documents"
        + (f" ({c['n_truncated']} truncated)" if c["n_truncated"] else ""),
        f"LongPPL       {fmt(c['longppl'])}   over {c['n_key_tokens']} key tokens "
        f"({coverage} of key characters)",
        f"LongPPL-soft  {fmt(c['longppl_soft'])}{unavailable_note(c, 'longppl_soft')}",
        f"bits/byte     {fmt(c['bpb'])} over {c['n_bytes']} bytes, {fmt(c['key_bpb'])} over "
        f"{c['n_key_bytes']} bytes of key tokens",
        "grid          "
        + (
            ", ".join(f"{k}: {fmt(v['longppl'])} ({v['n_key_tokens']})" for k, v in c["grid"].items())
            or "n/a"
        )
        + unavailable_note(c, "grid"),
        f"wall time     {row['wall_seconds']:.0f} s",
        f"appended to   {path}",
    ]
    print("\n".join(lines))


def unavailable_note(corpus: dict[str, Any], metric: str) -> str:
    reason = (corpus.get("unavailable") or {}).get(metric)
    return f"  ({reason})" if reason else ""
