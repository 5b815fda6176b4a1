"""The keytokens stage on its inputs (the corpus's documents, the evaluator loaded on this rank and its
scorer; ``pipeline.jobs.keytokens`` resolves them): the documents chosen and tokenized, the settings
fingerprinted (a finished artifact with the same fingerprint is left untouched; an unfinished one is
resumed), this rank's documents scored one part at a time, the evaluator's weight hashes (computed
beside the texts) settled, then (rank 0) the tables and the manifest written, with a LooGLE corpus's
questions beside them."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from pipeline.artifact.qa import kept_records
from pipeline.artifact.reader import load_artifact
from pipeline.artifact.schema import MANIFEST, RUN_STATE, settings_fingerprint
from pipeline.artifact.writer import ArtifactWriter, DamagedRecord, OtherSettings, read_record
from pipeline.errors import PipelineError
from pipeline.keytokens import ranks as distributed
from pipeline.keytokens.selection import Prepared, Selection, document_records, select
from pipeline.keytokens.tables import keytoken_tables
from pipeline.loogle.data.keytoken_corpus import LoogleCorpus
from pipeline.models.loading import LoadedModel
from pipeline.models.logprobs import TargetScorer
from pipeline.provenance import library_versions
from pipeline.text.corpus import Document
from pipeline.text.tokenization import encode_with_offsets


def write_keytokens(
    settings: Any,
    docs: list[Document],
    questions: LoogleCorpus | None,
    lm: LoadedModel,
    scorer: TargetScorer,
    ranks: distributed.Ranks,
    started: float,
) -> dict[str, Any]:
    """The stage on its inputs (``settings``: a ``pipeline.jobs.keytokens.KeyTokenSettings``), the
    artifact directory's lock held: a finished artifact is left as it is, an unfinished one resumed; a
    run that fails before its first document is written leaves nothing behind. The questions of a
    corpus that has them go beside the tables, for the documents scored. Returns the manifest."""
    identity = questions.identity() if questions is not None else None
    evaluator = lm.source.provisional(*recorded_weights(settings.artifact_dir()))  # not waiting for them
    selection = select(
        docs,
        lm,
        settings.definition,
        settings.documents,
        settings.corpus,
        settings.compute,
        identity,
        evaluator,
    )
    writer = ArtifactWriter(settings.artifact_dir(), selection.record, selection.fingerprint)
    finished = finished_artifact(writer, ranks.is_main)
    if finished is not None:
        lm.source.settle()  # the weights' hashes: those the finished artifact records, or an error
        if ranks.is_main:
            print(f"{writer.root} is complete with these settings: nothing to do")
        distributed.shutdown(ranks)
        return finished
    writer.start()
    resumed = len(writer.finished())
    try:
        score_documents(lm, scorer, selection.prepared, settings, writer, ranks)
    except BaseException:
        if ranks.is_main:
            writer.discard_if_empty()
        raise
    settle_evaluator(writer, lm)
    devices = ranks.gather(lm.placement)
    manifest = None
    if ranks.is_main:
        extra = manifest_extra(selection, devices, settings, resumed, time.time() - started)
        qa = None
        if questions is not None:
            qa = questions.tables([p.doc.id for p in selection.prepared])
            extra["questions"] = question_record(questions, qa, selection.prepared, lm)
        manifest = writer.finalize(range(len(selection.prepared)), extra, qa, settings.output.shard_rows)
    ranks.barrier()  # rank 0 has finalized
    distributed.shutdown(ranks)
    return manifest or load_artifact(writer.root).manifest


def recorded_weights(root: Path) -> tuple[dict[str, str] | None, str]:
    """The evaluator's weight hashes an earlier run on this artifact recorded (its ``run.json``, else its
    manifest), and which file says so; (None, "") where none did."""
    for name in (RUN_STATE, MANIFEST):
        with contextlib.suppress(DamagedRecord):
            evaluator = ((read_record(root / name) or {}).get("settings") or {}).get("evaluator")
            if isinstance(evaluator, dict) and isinstance(evaluator.get("weights_sha256"), dict):
                return evaluator["weights_sha256"], str(root / name)
    return None, ""


def settle_evaluator(writer: ArtifactWriter, lm: LoadedModel) -> None:
    """The evaluator's weights' hashes, waited for only now that the texts are computed, into the
    settings and fingerprint the manifest records; weights other than those the run computed with
    (changed since the load, or not those an earlier run on this artifact recorded) stop it here,
    before the manifest (``WeightsChanged``)."""
    evaluator = lm.source.to_dict()
    if evaluator != writer.settings.get("evaluator"):
        writer.settings = {**writer.settings, "evaluator": evaluator}
        writer.fingerprint = settings_fingerprint(writer.settings)


def finished_artifact(writer: ArtifactWriter, is_main: bool) -> dict[str, Any] | None:
    """The manifest of the finished artifact with these settings already there, if it loads with every
    check. One that does not (a damaged manifest, an edited table) is computed anew, as its error
    advises; one with other settings is an error (``ArtifactWriter.is_complete``)."""
    problem = None
    try:
        if writer.is_complete():
            return load_artifact(writer.root).manifest
    except PipelineError as exc:
        if isinstance(exc, OtherSettings):
            raise
        problem = exc
    if problem is not None and is_main:
        print(f"note: the artifact there does not load, so it is computed anew ({problem})")
    return None


def question_record(questions: LoogleCorpus, qa: dict, prepared: list[Prepared], lm: LoadedModel) -> dict:
    """The manifest's ``questions`` record: where they came from, and what the cut keeps of each
    document and its evidence (a truncated text's source tokenized whole, as stage 1 first does)."""
    documents = [
        {
            "doc_id": p.doc.id,
            "n_tokens": len(p.ids),
            "n_source_tokens": len(encode_with_offsets(lm.tokenizer, p.doc.text).ids)
            if p.truncated
            else len(p.ids),
            "n_chars": len(p.text),
            "n_source_chars": len(p.doc.text),
        }
        for p in prepared
    ]
    return {**questions.record, "documents": kept_records(qa, documents)}


def score_documents(
    lm: LoadedModel,
    scorer: TargetScorer,
    prepared: list[Prepared],
    settings: Any,
    writer: ArtifactWriter,
    ranks: distributed.Ranks,
) -> None:
    """Score and write this rank's unfinished documents; progress is counted in tokens, for an
    honest ETA (one set of bars: rank 0's, since ranks are balanced)."""
    scorer.check_against_full_forward()
    bos_id = lm.bos_token_id if settings.documents.add_bos else None
    owners = distributed.assign([len(p.ids) for p in prepared], ranks.world)
    mine = [p for p in prepared if owners[p.index] == ranks.rank]
    done = writer.finished()
    show = settings.output.progress and ranks.is_main

    def windows(batches):
        return tqdm(batches, desc="  short windows", unit="batch", leave=False, disable=not show)

    total = sum(len(p.ids) for p in mine)
    initial = sum(len(p.ids) for p in mine if p.index in done)
    with tqdm(
        total=total, initial=initial, desc="documents", unit="tok", unit_scale=True, disable=not show
    ) as bar:
        for item in (p for p in mine if p.index not in done):
            bar.set_postfix_str(item.doc.id)
            tables = keytoken_tables(scorer, item, settings.definition, bos_id, progress=windows)
            writer.write_part(item.index, *tables)
            bar.update(len(item.ids))
    ranks.barrier()  # every rank's parts are written


def manifest_extra(
    selection: Selection, devices: list[str], settings: Any, resumed: int, seconds: float
) -> dict[str, Any]:
    """The manifest beside the settings: documents, skipped documents, libraries, how the run ran."""
    return {
        "documents": document_records(selection.prepared),
        "skipped": selection.skipped,
        "libraries": library_versions(),
        "run": {
            "device": devices[0],
            "devices": devices,  # each rank's, with indices
            **settings.compute.record(),
            "wall_seconds": round(seconds, 1),
            "resumed_documents": resumed,
            "processes": len(devices),
        },
    }
