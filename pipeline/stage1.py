"""Stage 1 (`make keytokens`): an evaluator reads a corpus and writes the key-token artifact.

Run as ``python -m pipeline.stage1 [key=value ...]`` (Hydra overrides; see ``conf/keytokens.yaml``).
"""

from __future__ import annotations

import json
import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline import artifacts, distributed, keytokens, view
from pipeline.cli import hydra_main
from pipeline.corpus import CorpusSpec, Document, load_corpus
from pipeline.errors import PipelineError
from pipeline.models import is_local_model
from pipeline.provenance import json_sha256, library_versions, text_sha256

RESULT_SETTINGS = (
    "K",
    "d",
    "alpha",
    "beta",
    "gamma",
    "max_tokens",
    "min_tokens",
    "num_documents",
    "dtype",
    "add_bos",
    "short_window_bos",
)


@dataclass
class Prepared:
    """A document ready for scoring: the exact text scored and its evaluator tokens."""

    index: int
    doc: Document
    text: str
    ids: np.ndarray
    offsets: np.ndarray
    offsets_from: str
    truncated: bool


def encode_truncated(tokenizer: Any, text: str, max_tokens: int | None):
    """Encode ``text``; past ``max_tokens`` tokens, cut the text before the first dropped token
    and encode that prefix again, so the stored tokens are exactly the prefix's own tokens."""
    from pipeline.models import encode_with_offsets

    enc = encode_with_offsets(tokenizer, text)
    truncated = False
    while max_tokens is not None and len(enc.ids) > max_tokens:
        truncated = True
        text = text[: int(enc.offsets[max_tokens, 0])]
        enc = encode_with_offsets(tokenizer, text)
    return text, enc, truncated


def prepare_documents(docs: list[Document], tokenizer: Any, cfg: Any, context: int | None, bos: int):
    """Tokenize and truncate; return (documents to score, skipped documents with reasons)."""
    prepared: list[Prepared] = []
    skipped: list[dict[str, str]] = []
    for doc in docs:
        if cfg.num_documents is not None and len(prepared) >= cfg.num_documents:
            break
        if not doc.text.strip():
            skipped.append({"doc_id": doc.id, "reason": "empty or whitespace-only text"})
            continue
        text, enc, truncated = encode_truncated(tokenizer, doc.text, cfg.max_tokens)
        n_seq = len(enc.ids) + bos
        if len(enc.ids) < cfg.min_tokens:
            skipped.append(
                {"doc_id": doc.id, "reason": f"{len(enc.ids)} tokens < min_tokens={cfg.min_tokens}"}
            )
            continue
        if n_seq <= cfg.K:
            skipped.append(
                {
                    "doc_id": doc.id,
                    "reason": f"{len(enc.ids)} tokens: no token has a short context (K={cfg.K})",
                }
            )
            continue
        if context is not None and n_seq > context:
            raise PipelineError(
                f"document '{doc.id}' has {n_seq} tokens, more than the evaluator's context of {context}: "
                f"set max_tokens<={context - bos} to truncate (recorded per document)"
            )
        prepared.append(Prepared(len(prepared), doc, text, enc.ids, enc.offsets, enc.offsets_from, truncated))
    return prepared, skipped


def score_document(scorer, item: Prepared, cfg: Any, bos_id: int | None, progress=None):
    """Long and short passes, key tokens and spans of one document, as artifact rows."""
    import torch

    from pipeline.logprobs import long_and_short_logprobs

    prefix = [bos_id] if bos_id is not None else []
    seq = torch.tensor(prefix + item.ids.tolist(), dtype=torch.long)
    result = long_and_short_logprobs(
        scorer,
        seq,
        cfg.K,
        cfg.d,
        bos_id=bos_id if cfg.short_window_bos else None,
        window_batch_tokens=cfg.window_batch_tokens,
        progress=progress,
    )
    o = len(prefix)
    long, short = result.long[o:], result.short[o:]
    lsd = keytokens.long_short_difference(long, short)
    key = keytokens.is_key(lsd, long, cfg.alpha, cfg.beta)
    weight = keytokens.soft_weight(lsd, cfg.gamma)
    starts, ends = item.offsets[:, 0], item.offsets[:, 1]
    span_starts, span_ends, span_counts = keytokens.merge_spans(starts[key], ends[key])
    n = len(item.ids)
    doc_id = item.doc.id
    tokens = pa.table(
        {
            "doc_id": pa.array([doc_id] * n, pa.string()),
            "token_index": pa.array(np.arange(n, dtype=np.int32)),
            "token_id": pa.array(item.ids.astype(np.int64)),
            "char_start": pa.array(starts.astype(np.int32)),
            "char_end": pa.array(ends.astype(np.int32)),
            "long_logprob": pa.array(long, from_pandas=True),
            "short_logprob": pa.array(short, from_pandas=True),
            "lsd": pa.array(lsd, from_pandas=True),
            "soft_weight": pa.array(weight, from_pandas=True),
            "is_key": pa.array(key),
        }
    )
    spans = pa.table(
        {
            "doc_id": pa.array([doc_id] * len(span_starts), pa.string()),
            "span_index": pa.array(np.arange(len(span_starts), dtype=np.int32)),
            "char_start": pa.array(span_starts.astype(np.int32)),
            "char_end": pa.array(span_ends.astype(np.int32)),
            "n_tokens": pa.array(span_counts.astype(np.int32)),
        }
    )
    document = {
        "doc_id": doc_id,
        "doc_index": item.index,
        "text": item.text,
        "sha256": text_sha256(item.text),
        "source_sha256": item.doc.sha256,
        "n_chars": len(item.text),
        "n_source_chars": len(item.doc.text),
        "n_tokens": n,
        "truncated": item.truncated,
        "n_key_tokens": int(key.sum()),
        "n_spans": len(span_starts),
        "offsets_from": item.offsets_from,
    }
    return document, tokens, spans


def corpus_spec(cfg: Any) -> CorpusSpec:
    from hydra.utils import to_absolute_path

    c = cfg.corpus
    path = to_absolute_path(c.path) if c.get("path") else None
    return CorpusSpec(
        name=c.name,
        path=path,
        dataset=c.get("dataset"),
        config=c.get("config"),
        split=c.get("split", "test"),
        revision=c.get("revision"),
        text_field=c.get("text_field", "text"),
        id_field=c.get("id_field"),
    )


def result_identity(settings: dict[str, Any]) -> dict[str, Any]:
    """What the numbers depend on: the settings without file locations (the evaluator's file hash
    or revision and the documents' hashes stand for them), so that the same run on another machine
    has the same fingerprint."""
    identity = json.loads(json.dumps(settings))
    identity["evaluator"].pop("path", None)
    if identity["evaluator"]["kind"] in ("local", "gguf"):  # the spec is a path too
        identity["evaluator"].pop("spec", None)
    identity["corpus"].pop("path", None)
    return identity


def artifact_name(cfg: Any) -> str:
    if cfg.name:
        return str(cfg.name)
    evaluator = Path(str(cfg.evaluator.spec)).name.removesuffix(".gguf").replace("/", "--")
    limit = f"-max{cfg.max_tokens}" if cfg.max_tokens else ""
    return f"{cfg.corpus.name}--{evaluator}--K{cfg.K}-d{cfg.d}{limit}"


def run(cfg: Any) -> dict[str, Any]:
    """Run stage 1 end to end; returns the manifest."""
    from hydra.utils import to_absolute_path

    started = time.time()
    spec = corpus_spec(cfg)
    if not spec.needs_network and is_local_model(str(cfg.evaluator.spec)):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing to download: fail fast, never wait on retries
    docs = load_corpus(spec)

    from pipeline.logprobs import TargetScorer

    ranks = distributed.init_ranks(use_cuda=_wants_cuda(cfg))
    lm = _load_evaluator(cfg, ranks)
    bos_id = lm.bos_token_id if cfg.add_bos else None
    context = lm.context_length
    if cfg.max_tokens is not None and context is not None and cfg.max_tokens + (bos_id is not None) > context:
        raise PipelineError(
            f"max_tokens={cfg.max_tokens} exceeds the evaluator's context of {context} tokens: "
            f"set max_tokens<={context - (bos_id is not None)}"
        )
    prepared, skipped = prepare_documents(docs, lm.tokenizer, cfg, context, int(bos_id is not None))
    if not prepared:
        raise PipelineError(f"no document of corpus '{spec.name}' can be scored: {skipped[:3]}")

    settings = {k: _plain(cfg[k]) for k in RESULT_SETTINGS}
    settings["evaluator"] = lm.source.to_dict()
    settings["corpus"] = {
        "name": spec.name,
        "path": cfg.corpus.get("path"),
        "dataset": spec.dataset,
        "split": spec.split,
        "revision": spec.revision,
        "text_field": spec.text_field,
    }
    settings["documents"] = [{"doc_id": p.doc.id, "source_sha256": p.doc.sha256} for p in prepared]
    settings["libraries"] = {k: v for k, v in library_versions().items() if k in ("torch", "transformers")}
    fingerprint = json_sha256(result_identity(settings))
    root = Path(to_absolute_path(cfg.output_dir)) / artifact_name(cfg)
    writer = artifacts.ArtifactWriter(root, settings, fingerprint)
    if writer.is_complete():
        if ranks.is_main:
            print(f"{root} is complete with these settings: nothing to do")
        distributed.shutdown(ranks)
        return artifacts.load_artifact(root).manifest
    writer.start()

    scorer = TargetScorer(lm.model, head_chunk=cfg.head_chunk, vocab_tile=cfg.get("vocab_tile"))
    scorer.check_against_full_forward()
    done = writer.finished()
    cfg.progress = bool(cfg.progress) and ranks.is_main  # one set of bars: rank 0's (balanced ranks)
    owners = distributed.assign([len(p.ids) for p in prepared], ranks.world)
    mine = [p for p in prepared if owners[p.index] == ranks.rank]
    todo = [p for p in mine if p.index not in done]
    total = sum(len(p.ids) for p in mine)
    _score_all(scorer, todo, cfg, bos_id, writer, total - sum(len(p.ids) for p in todo), total)
    ranks.barrier()  # every rank's parts are written
    if not ranks.is_main:
        ranks.barrier()  # rank 0 finalizes
        distributed.shutdown(ranks)
        return artifacts.load_artifact(root).manifest
    extra = {
        "documents": [
            {
                "doc_id": p.doc.id,
                "sha256": text_sha256(p.text),
                "source_sha256": p.doc.sha256,
                "n_tokens": len(p.ids),
                "truncated": p.truncated,
            }
            for p in prepared
        ],
        "skipped": skipped,
        "libraries": library_versions(),
        "run": {
            "device": str(lm.device),
            "head_chunk": cfg.head_chunk,
            "vocab_tile": cfg.get("vocab_tile"),
            "window_batch_tokens": cfg.window_batch_tokens,
            "wall_seconds": round(time.time() - started, 1),
            "resumed_documents": len(done),
            "processes": ranks.world,
        },
    }
    manifest = writer.finalize(range(len(prepared)), extra)
    print_summary(root, manifest, time.time() - started)
    print(f"key tokens  {view.write_view(root, view.default_path(root, None))} (open in a browser)")
    ranks.barrier()
    distributed.shutdown(ranks)
    return manifest


def _score_all(
    scorer, todo: list[Prepared], cfg, bos_id, writer, done_tokens: int, total_tokens: int
) -> None:
    """Score and write each unfinished document; progress is counted in tokens, for an honest ETA."""
    from tqdm.auto import tqdm

    show = bool(cfg.progress)

    def windows(batches):
        return tqdm(batches, desc="  short windows", unit="batch", leave=False, disable=not show)

    with tqdm(
        total=total_tokens,
        initial=done_tokens,
        desc="documents",
        unit="tok",
        unit_scale=True,
        disable=not show,
    ) as bar:
        for item in todo:
            bar.set_postfix_str(item.doc.id)
            document, tokens, spans = score_document(scorer, item, cfg, bos_id, progress=windows)
            writer.write_part(item.index, document, tokens, spans)
            bar.update(len(item.ids))


def print_summary(root: Path, manifest: dict[str, Any], seconds: float) -> None:
    art = artifacts.load_artifact(root, verify_hashes=False)  # finalize just hashed these files
    lsd = np.asarray(art.tokens["lsd"].to_numpy(zero_copy_only=False), dtype=np.float64)
    lsd = lsd[~np.isnan(lsd)]
    n_tokens = art.tokens.num_rows
    n_key = int(np.asarray(art.tokens["is_key"]).sum())
    q = np.quantile(lsd, [0.5, 0.9, 0.99, 0.999]) if len(lsd) else [float("nan")] * 4
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    lines = [
        f"documents   {art.documents.num_rows} scored, {len(manifest.get('skipped', []))} skipped"
        f" ({sum(art.documents['truncated'].to_pylist())} truncated)",
        f"tokens      {n_tokens} ({len(lsd)} with a short context)",
        f"key tokens  {n_key} ({100 * n_key / max(len(lsd), 1):.2f}% of tokens with a short context)",
        f"LSD         median {q[0]:.3f}, p90 {q[1]:.3f}, p99 {q[2]:.3f}, p99.9 {q[3]:.3f}",
        f"wall time   {seconds:.0f} s (peak memory {peak_gb:.2f} GB)",
        f"output      {root}",
    ]
    for skip in manifest.get("skipped", []):
        lines.append(f"skipped     {skip['doc_id']}: {skip['reason']}")
    print("\n".join(lines))


def _wants_cuda(cfg: Any) -> bool:
    import torch

    return str(cfg.device).startswith("cuda") or (cfg.device == "auto" and torch.cuda.is_available())


def _load_evaluator(cfg: Any, ranks: distributed.Ranks):
    """Load the evaluator; with several ranks, rank 0 first (it converts a GGUF once for all), and
    each rank on its own slice of the node's GPUs (one GPU, or several with device_map=auto)."""
    from pipeline.models import load_configured_model

    gpus = None
    if ranks.world > 1 and _wants_cuda(cfg):
        gpus = distributed.local_gpus(ranks)
        if not cfg.evaluator.get("device_map"):
            cfg.device = f"cuda:{gpus[0]}"
    if not ranks.is_main:
        ranks.barrier()
    lm = load_configured_model(cfg.evaluator, cfg, gpus=gpus)
    if ranks.is_main:
        ranks.barrier()
    return lm


def _plain(value: Any) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def main() -> None:
    hydra_main("keytokens", run)


if __name__ == "__main__":
    main()
