"""The keytokens run (`make keytokens`): an evaluator reads a corpus and writes the key-token artifact.

Steps: load the corpus and the evaluator, choose and tokenize the documents, fingerprint the settings
(a finished artifact with the same fingerprint is left untouched; an unfinished one is resumed), score
this rank's documents one part at a time, then (rank 0) write the tables, the manifest and the
key-token page.
"""

from __future__ import annotations

import os
import resource
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from pipeline import distributed, run_lock
from pipeline.artifact_writer import ArtifactWriter
from pipeline.artifacts import load_artifact, settings_fingerprint
from pipeline.corpus import load_corpus
from pipeline.errors import PipelineError
from pipeline.keytokens.documents import Prepared, prepare_documents
from pipeline.keytokens.settings import KeyTokenSettings
from pipeline.keytokens.tables import keytoken_tables
from pipeline.logprobs import TargetScorer
from pipeline.models import LoadedModel, dtype_name, is_local_model, resolve_head_dtype
from pipeline.provenance import library_versions, text_sha256
from pipeline.reporting import keytoken_page


@dataclass
class Selection:
    """The documents of a run, the settings record they give, and its fingerprint."""

    prepared: list[Prepared]
    skipped: list[dict[str, str]]
    record: dict[str, Any]
    fingerprint: str


def run(settings: KeyTokenSettings) -> dict[str, Any]:
    """The whole run; returns the artifact's manifest. Rank 0 holds the artifact directory's lock
    (``pipeline.run_lock``) throughout: a second run on the same artifact stops at once."""
    started = time.time()
    if not settings.corpus.needs_network and is_local_model(settings.evaluator.spec):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing to download: fail fast, never wait on retries
    docs = load_corpus(settings.corpus)
    if not docs:
        raise PipelineError(f"corpus '{settings.corpus.name}' has no documents: nothing to score")
    ranks = distributed.init_ranks(use_cuda=wants_cuda(settings.device))
    with ExitStack() as stack:
        if ranks.is_main:
            stack.enter_context(run_lock.exclusive(settings.artifact_dir(), "keytokens run"))
        return locked_run(settings, docs, ranks, started)


def locked_run(
    settings: KeyTokenSettings, docs: list, ranks: distributed.Ranks, started: float
) -> dict[str, Any]:
    """The run, with the lock held: a finished artifact is left as it is, an unfinished one resumed;
    a run that fails before its first document is written leaves nothing behind."""
    lm = load_evaluator(settings, ranks)
    selection = select(docs, lm, settings)
    writer = ArtifactWriter(settings.artifact_dir(), selection.record, selection.fingerprint)
    if writer.is_complete():
        if ranks.is_main:
            print(f"{writer.root} is complete with these settings: nothing to do")
        distributed.shutdown(ranks)
        return load_artifact(writer.root).manifest
    writer.start()
    resumed = len(writer.finished())
    try:
        score_documents(lm, selection.prepared, settings, writer, ranks)
    except BaseException:
        if ranks.is_main:
            writer.discard_if_empty()
        raise
    devices = ranks.gather(lm.placement)
    manifest = None
    if ranks.is_main:
        manifest = finish(writer, selection, devices, settings, resumed, time.time() - started)
    ranks.barrier()  # rank 0 has finalized
    distributed.shutdown(ranks)
    return manifest or load_artifact(writer.root).manifest


def wants_cuda(device: str) -> bool:
    return device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())


def load_evaluator(settings: KeyTokenSettings, ranks: distributed.Ranks) -> LoadedModel:
    """Load the evaluator; with several ranks, rank 0 first (it converts a GGUF once for all), and
    each rank on its own slice of the node's GPUs (one GPU, or several with device_map=auto)."""
    gpus, device = None, settings.device
    if ranks.gpus:
        gpus = list(ranks.gpus)
        if not settings.evaluator.device_map:
            device = f"cuda:{gpus[0]}"
    if not ranks.is_main:
        ranks.barrier()
    lm = settings.evaluator.load(dtype=settings.dtype, device=device, cache_dir=settings.cache_dir, gpus=gpus)
    if ranks.is_main:
        ranks.barrier()
    return lm


def select(docs: list, lm: LoadedModel, settings: KeyTokenSettings) -> Selection:
    """The documents this run scores, within the evaluator's context, and the settings record."""
    bos = int(settings.add_bos and lm.bos_token_id is not None)
    context = lm.context_length
    if settings.max_tokens is not None and context is not None and settings.max_tokens + bos > context:
        raise PipelineError(
            f"max_tokens={settings.max_tokens} exceeds the evaluator's context of {context} tokens: "
            f"set max_tokens<={context - bos}"
        )
    prepared, skipped = prepare_documents(docs, lm.tokenizer, settings, context, bos)
    if not prepared:
        raise PipelineError(f"no document of corpus '{settings.corpus.name}' can be scored: {skipped[:3]}")
    record = settings_record(settings, lm, prepared)
    return Selection(prepared, skipped, record, settings_fingerprint(record))


def settings_record(settings: KeyTokenSettings, lm: LoadedModel, prepared: list[Prepared]) -> dict[str, Any]:
    """The manifest's ``settings``: what the numbers depend on, and where the inputs came from. The
    dtypes and the device type are the resolved ones (``dtype=auto`` runs in bfloat16 on CUDA and
    float32 on a CPU: a run resumed elsewhere must not mix them); the device index is not (ranks run
    on different GPUs of one kind), it is in the manifest's ``run``."""
    spec = settings.corpus
    corpus = {
        "name": spec.name,
        "path": spec.path,
        "dataset": spec.dataset,
        "split": spec.split,
        "revision": spec.revision,
        "text_field": spec.text_field,
    }
    if spec.tokenized_with:  # texts decoded from a pre-tokenized dataset: how they were selected and decoded
        corpus |= {
            k: getattr(spec, k)
            for k in ("tokenized_with", "tokenizer_revision", "min_tokenized_len", "max_ids", "limit")
        }
    return {
        **settings.result_settings(),
        "dtype": dtype_name(lm.dtype),
        "device": lm.device.type,
        "head_dtype": dtype_name(head_dtype(settings, lm)),
        "evaluator": lm.source.to_dict(),
        "corpus": corpus,
        "documents": [{"doc_id": p.doc.id, "source_sha256": p.doc.sha256} for p in prepared],
        "libraries": {k: v for k, v in library_versions().items() if k in ("torch", "transformers")},
    }


def head_dtype(settings: KeyTokenSettings, lm: LoadedModel) -> torch.dtype:
    """The dtype the evaluator's output head computes in (``head_dtype``, resolved)."""
    return resolve_head_dtype(settings.head_dtype, lm.dtype, lm.device)


def score_documents(
    lm: LoadedModel,
    prepared: list[Prepared],
    settings: KeyTokenSettings,
    writer: ArtifactWriter,
    ranks: distributed.Ranks,
) -> None:
    """Score and write this rank's unfinished documents; progress is counted in tokens, for an
    honest ETA (one set of bars: rank 0's, since ranks are balanced)."""
    scorer = TargetScorer(
        lm.model,
        head_chunk=settings.head_chunk,
        vocab_tile=settings.vocab_tile,
        head_dtype=head_dtype(settings, lm),
    )
    scorer.check_against_full_forward()
    bos_id = lm.bos_token_id if settings.add_bos else None
    owners = distributed.assign([len(p.ids) for p in prepared], ranks.world)
    mine = [p for p in prepared if owners[p.index] == ranks.rank]
    done = writer.finished()
    show = settings.progress and ranks.is_main

    def windows(batches):
        return tqdm(batches, desc="  short windows", unit="batch", leave=False, disable=not show)

    total = sum(len(p.ids) for p in mine)
    initial = sum(len(p.ids) for p in mine if p.index in done)
    with tqdm(
        total=total, initial=initial, desc="documents", unit="tok", unit_scale=True, disable=not show
    ) as bar:
        for item in (p for p in mine if p.index not in done):
            bar.set_postfix_str(item.doc.id)
            writer.write_part(item.index, *keytoken_tables(scorer, item, settings, bos_id, progress=windows))
            bar.update(len(item.ids))
    ranks.barrier()  # every rank's parts are written


def finish(
    writer: ArtifactWriter,
    selection: Selection,
    devices: list[str],
    settings: KeyTokenSettings,
    resumed: int,
    seconds: float,
) -> dict[str, Any]:
    """Write the tables and the manifest (rank 0), print the summary, write the key-token pages."""
    extra = {
        "documents": document_records(selection.prepared),
        "skipped": selection.skipped,
        "libraries": library_versions(),
        "run": {
            "device": devices[0],
            "devices": devices,  # each rank's, with indices
            "head_chunk": settings.head_chunk,
            "vocab_tile": settings.vocab_tile,
            "window_batch_tokens": settings.window_batch_tokens,
            "wall_seconds": round(seconds, 1),
            "resumed_documents": resumed,
            "processes": len(devices),
        },
    }
    manifest = writer.finalize(range(len(selection.prepared)), extra)
    print_summary(writer.root, manifest, seconds)
    index = keytoken_page.write_views(writer.root)
    print(f"key tokens  {index} (every document's page; open in a browser)")
    return manifest


def document_records(prepared: list[Prepared]) -> list[dict[str, Any]]:
    """The manifest's record of each document: id, hashes of the text scored and of its source,
    evaluator token count, truncation."""
    return [
        {
            "doc_id": p.doc.id,
            "sha256": text_sha256(p.text),
            "source_sha256": p.doc.sha256,
            "n_tokens": len(p.ids),
            "truncated": p.truncated,
        }
        for p in prepared
    ]


def print_summary(root: Path, manifest: dict[str, Any], seconds: float) -> None:
    art = load_artifact(root, verify_hashes=False)  # finalize just hashed these files
    lsd = np.asarray(art.tokens["lsd"].to_numpy(zero_copy_only=False), dtype=np.float64)
    lsd = lsd[~np.isnan(lsd)]
    n_key = int(np.asarray(art.tokens["is_key"]).sum())
    q = np.quantile(lsd, [0.5, 0.9, 0.99, 0.999]) if len(lsd) else [float("nan")] * 4
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    lines = [
        f"documents   {art.documents.num_rows} scored, {len(manifest.get('skipped', []))} skipped"
        f" ({sum(art.documents['truncated'].to_pylist())} truncated)",
        f"tokens      {art.tokens.num_rows} ({len(lsd)} with a short context)",
        f"key tokens  {n_key} ({100 * n_key / max(len(lsd), 1):.2f}% of tokens with a short context)",
        f"LSD         median {q[0]:.3f}, p90 {q[1]:.3f}, p99 {q[2]:.3f}, p99.9 {q[3]:.3f}",
        f"wall time   {seconds:.0f} s (peak memory {peak_gb:.2f} GB)",
        f"output      {root}",
    ]
    lines += [f"skipped     {skip['doc_id']}: {skip['reason']}" for skip in manifest.get("skipped", [])]
    print("\n".join(lines))
