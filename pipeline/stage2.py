"""Stage 2 (`make score MODEL=...`): score a causal LM against a cached key-token artifact.

Run as ``python -m pipeline.stage2 [key=value ...]`` (Hydra overrides; see ``conf/score.yaml``).
Needs no corpus and no evaluator: the texts, spans and LSD come from the artifact.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipeline import __version__, scoring
from pipeline.artifacts import HUB_PREFIX, load_artifact, locate_artifact
from pipeline.cli import hydra_main
from pipeline.provenance import json_sha256, library_versions


def score_settings(cfg: Any) -> scoring.ScoreSettings:
    return scoring.ScoreSettings(
        add_bos=bool(cfg.add_bos),
        context_limit=cfg.context_limit,
        allow_truncation=bool(cfg.allow_truncation),
        grid=tuple((float(a), float(b)) for a, b in cfg.grid),
        head_chunk=int(cfg.head_chunk),
        vocab_tile=cfg.get("vocab_tile"),
        window_batch_tokens=int(cfg.window_batch_tokens),
    )


def model_name(cfg: Any) -> str:
    if cfg.model.get("name"):
        return str(cfg.model.name)
    spec = str(cfg.model.spec)
    path = Path(spec)
    return path.stem if spec.endswith(".gguf") else path.name if path.is_dir() else spec


def run(cfg: Any) -> dict[str, Any]:
    """Score one model; append the result row to the results file and return it."""
    from hydra.utils import to_absolute_path
    from tqdm.auto import tqdm

    from pipeline.logprobs import TargetScorer
    from pipeline.models import is_local_model, load_configured_model

    started = time.time()
    spec = str(cfg.model.spec)
    keytokens_spec = str(cfg.keytokens)
    if is_local_model(spec) and not keytokens_spec.startswith(HUB_PREFIX):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing to download: fail fast
    if not keytokens_spec.startswith(HUB_PREFIX):
        keytokens_spec = to_absolute_path(keytokens_spec)
    artifact_path, artifact_source = locate_artifact(keytokens_spec)
    artifact = load_artifact(artifact_path)
    settings = score_settings(cfg)
    lm = load_configured_model(cfg.model, cfg)
    scorer = TargetScorer(lm.model, head_chunk=settings.head_chunk, vocab_tile=settings.vocab_tile)
    scorer.check_against_full_forward()
    views = list(scoring.iter_documents(artifact))
    scores = [
        scoring.score_document(lm, scorer, view, settings)
        for view in tqdm(views, desc="documents", unit="doc", disable=not cfg.progress)
    ]
    row = result_row(cfg, lm, artifact, settings, scores, time.time() - started)
    row["artifact"]["source"] = artifact_source
    append_result(Path(to_absolute_path(str(cfg.results))), row)
    print_result(row, Path(to_absolute_path(str(cfg.results))))
    return row


def result_row(cfg, lm, artifact, settings, scores, seconds: float) -> dict[str, Any]:
    """One results line: the numbers and everything needed to reproduce them."""
    settings_record = {
        **scoring.settings_dict(settings),
        "dtype": str(lm.dtype).removeprefix("torch."),
        "device": str(lm.device),
    }
    model = {**lm.source.to_dict(), "bos_token_id": lm.bos_token_id if settings.add_bos else None}
    identity = {"model": model, "artifact": artifact.manifest["fingerprint"], "settings": settings_record}
    return {
        "result_id": json_sha256(identity)[:16],
        "model_name": model_name(cfg) + (f"@ctx{settings.context_limit}" if settings.context_limit else ""),
        "model": model,
        "artifact": {
            "name": artifact.root.name,
            "fingerprint": artifact.manifest["fingerprint"],
            "source": str(artifact.root),
            "evaluator": artifact.settings["evaluator"]["spec"],
            "K": artifact.settings["K"],
            "d": artifact.settings["d"],
            "alpha": artifact.settings["alpha"],
            "beta": artifact.settings["beta"],
        },
        "settings": settings_record,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_seconds": round(seconds, 2),
        "pipeline_version": __version__,
        "libraries": library_versions(),
        "corpus": scoring.corpus_summary(scores),
        "documents": [s.summary() for s in scores],
    }


def append_result(path: Path, row: dict[str, Any]) -> None:
    """Append one line; a single O_APPEND write, flushed to disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def print_result(row: dict[str, Any], results: Path) -> None:
    c = row["corpus"]
    coverage = "n/a" if c["key_char_coverage"] is None else f"{100 * c['key_char_coverage']:.1f}%"
    lines = [
        f"model         {row['model_name']}  (artifact {row['artifact']['name']})",
        f"PPL           {_fmt(c['ppl'])}   over {c['n_tokens']} tokens in {c['n_documents']} documents"
        + (f" ({c['n_truncated']} truncated)" if c["n_truncated"] else ""),
        f"LongPPL       {_fmt(c['longppl'])}   over {c['n_key_tokens']} key tokens "
        f"({coverage} of key characters)",
        f"LongPPL-soft  {_fmt(c['longppl_soft'])}",
        "grid          "
        + ", ".join(f"{k}: {_fmt(v['longppl'])} ({v['n_key_tokens']})" for k, v in c["grid"].items()),
        f"wall time     {row['wall_seconds']:.0f} s",
        f"appended to   {results}",
    ]
    print("\n".join(lines))


def main() -> None:
    hydra_main("score", run)


if __name__ == "__main__":
    main()
