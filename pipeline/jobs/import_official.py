"""The import job (`make import-official EVALUATOR=<name>`): the paper's key spans as an artifact, run
by the recipe as every job is (its folder locked, offline unless a source is on the Hub; no model).

Steps: read the span files (numbers only), pin the sources (Hub commits, or local copies by hash),
rebuild the texts with the corpus the spans index (``conf/corpus/govreport_paper.yaml``: the official
script's selection and decode), check the document count, that every span lies in its text, and that
the spans start and end on the evaluator's token boundaries; then write a ``key_spans`` artifact.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pyarrow as pa
import pydantic.dataclasses
from pydantic import Field
from tqdm.auto import tqdm

from pipeline.artifact.schema import (
    DOCUMENTS_SCHEMA,
    KEY_SPANS,
    MANIFEST,
    SPANS_SCHEMA,
    KeyTokenArtifact,
    new_manifest,
    settings_fingerprint,
    table_from_columns,
)
from pipeline.artifact.writer import FOLDER, DamagedRecord, read_record, write_artifact
from pipeline.definition import KeyTokenDefinition
from pipeline.errors import PipelineError
from pipeline.files import locate_input
from pipeline.jobs.recipe import JobResult
from pipeline.official.boundaries import (
    BoundaryReport,
    add_document,
    check_document,
    evaluator_offsets,
    require,
)
from pipeline.official.pinned_inputs import Pinned, load_tokenizer, pin
from pipeline.official.span_files import SLICE, merge_overlaps, read_span_folder
from pipeline.outputs import Output
from pipeline.provenance import file_sha256, json_sha256, library_versions
from pipeline.reporting.import_official import import_summary
from pipeline.settings import DirectoryName, Text, directory_name, parse, parse_group
from pipeline.text.alignment import hard_key_mask
from pipeline.text.corpus import CorpusSpec, Document, load_corpus


@pydantic.dataclasses.dataclass(frozen=True)
class OfficialSpans:
    """An ``official/`` group: one evaluator's span files and the tokenizer of its boundary check."""

    folder: Text  # data/official-key-text/<folder>
    evaluator: Text  # the model that computed them (not loaded)
    tokenizer: Text  # Hub id or directory
    tokenizer_revision: Text | None = None


@pydantic.dataclasses.dataclass(frozen=True)
class ImportOptions:
    """``conf/import_official.yaml`` (the corpus and the definition are their own types)."""

    official: OfficialSpans
    spans_dir: str
    source: dict[str, Text]  # where the span files come from: repository, commit, folder, license
    min_boundary_share: Annotated[float, Field(ge=0, le=1)] = 0.99
    name: DirectoryName | None = None
    output_dir: str = "artifacts/keytokens"
    progress: bool = True


@dataclasses.dataclass(frozen=True)
class ImportJob:
    """`make import-official`'s settings, typed: its own, the key-token definition (the official
    package's: no BOS before the short windows) and the corpus the spans index. Run by the recipe, which
    loads no model for it (the spans are read, not computed) and locks the artifact's folder."""

    options: ImportOptions
    definition: KeyTokenDefinition
    corpus: CorpusSpec
    model = None
    compute = None
    results = None  # the artifact is its output
    results_setting = "output_dir"
    results_kind = None
    folder_use = ("import run", "pass name=<other name>")

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> ImportJob:
        """``conf/import_official.yaml`` as plain data, typed and checked (an unknown key of the
        ``official`` group is a typo)."""
        options = parse(ImportOptions, values)
        parse(OfficialSpans, values["official"], prefix="official.", strict=True)
        definition = parse(KeyTokenDefinition, {**values, "short_window_bos": False})
        return cls(options, definition, parse_group(CorpusSpec, values, "corpus"))

    @property
    def folder(self) -> Path:
        """The artifact's folder: ``name``, or ``<corpus>--official--<evaluator folder>``."""
        name = self.options.name or directory_name(
            f"{self.corpus.name}--official--{self.options.official.folder}"
        )
        return Path(self.options.output_dir).absolute() / name

    def outputs(self) -> list[Output]:
        return [Output("output_dir", self.folder, FOLDER)]

    def needs_hub(self) -> bool:
        """Whether a source is on the Hub: the corpus's dataset or decoder, or the evaluator's tokenizer."""
        return self.corpus.needs_network or not Path(self.options.official.tokenizer).expanduser().exists()

    def open(self) -> Sources:
        """The span files (numbers only), the sources pinned (Hub commits, or local copies by hash), the
        texts rebuilt with the corpus the spans index, one per span file, and the evaluator's tokenizer."""
        official, spans_dir = self.options.official, locate_input(self.options.spans_dir)
        spans = read_span_folder(spans_dir)
        corpus_pin, decoder_pin, spec = pinned_corpus(self.corpus)
        tokenizer_pin = pin(official.tokenizer, official.tokenizer_revision, "model", "official.tokenizer")
        docs = load_corpus(spec)
        if len(docs) != len(spans):
            raise PipelineError(
                f"{spans_dir} has span files for {len(spans)} documents, corpus '{spec.name}' gives "
                f"{len(docs)}: the spans index the first documents of the official selection, one file per "
                "document"
            )
        tokenizer = load_tokenizer(tokenizer_pin, "the evaluator tokenizer", "official.tokenizer")
        pins = {"corpus": corpus_pin.record, "decoder": decoder_pin.record, "tokenizer": tokenizer_pin.record}
        return Sources(spans_dir, spans, spec, docs, tokenizer, pins)

    @staticmethod
    def append(path: Path, row: dict[str, Any]) -> None:
        raise NotImplementedError("the import job writes no results lines")

    def measure(self, lm: None, scorer: None, sources: Sources, record: Any, started: float) -> JobResult:
        """The spans checked against their texts and the evaluator's token boundaries, then written as
        a ``key_spans`` artifact (left as it is when this exact one is there); its manifest."""
        return JobResult(import_spans(self, sources, started))


@dataclasses.dataclass(frozen=True)
class Sources:
    """What an import reads, opened: the span files, the corpus pinned and its texts, the tokenizer."""

    spans_dir: Path
    spans: list[np.ndarray]
    spec: CorpusSpec
    docs: list[Document]
    tokenizer: Any
    pins: dict[str, Any]


def import_spans(job: ImportJob, sources: Sources, started: float) -> dict[str, Any]:
    """The whole import of the opened ``sources``; returns the artifact's manifest."""
    options, definition, official = job.options, job.definition, job.options.official
    spans_dir, spec, docs = sources.spans_dir, sources.spec, sources.docs
    report = BoundaryReport(tokenizer=official.tokenizer, threshold=options.min_boundary_share)
    rows, span_tables, merged = [], [], 0
    for index, (doc, doc_spans) in enumerate(
        tqdm(
            list(zip(docs, sources.spans, strict=True)),
            desc="documents",
            unit="doc",
            disable=not options.progress,
        )
    ):
        check_inside(doc, doc_spans, spans_dir / f"slice_{index}.txt")
        found = check_document(evaluator_offsets(sources.tokenizer, doc.text), doc_spans)
        add_document(report, doc.id, doc.text, doc_spans, found)
        disjoint, n_merged = merge_overlaps(doc_spans)
        merged += n_merged
        row, table = document_tables(index, doc, disjoint, found.offsets)
        rows.append(row)
        span_tables.append(table)
    require(report, f"the key spans of {spans_dir}")
    settings = settings_record(options, definition, spec, docs, sources.pins)
    tables = {
        "documents": pa.Table.from_pylist(rows, DOCUMENTS_SCHEMA),
        "spans": pa.concat_tables(span_tables) if span_tables else SPANS_SCHEMA.empty_table(),
    }
    root = job.folder
    fingerprint = settings_fingerprint(settings, KEY_SPANS)
    if (existing := existing_same(root, fingerprint)) is not None:
        return existing
    extra = {
        "documents": [
            {k: r[k] for k in ("doc_id", "sha256", "source_sha256", "n_tokens", "n_spans")} for r in rows
        ],
        "boundary_check": report.record(),
        "merged_overlapping_spans": merged,  # spans of the files that overlapped another (merged into it)
        "skipped": [],
        "libraries": library_versions(),
        "run": {"wall_seconds": round(time.time() - started, 1)},
    }
    manifest = new_manifest(KEY_SPANS, fingerprint, settings, extra)
    manifest = write_artifact(
        root, KeyTokenArtifact(root, manifest, tables["documents"], None, tables["spans"])
    )
    print(import_summary(root, report, tables["spans"].num_rows, len(rows)))
    return manifest


def pinned_corpus(corpus: CorpusSpec) -> tuple[Pinned, Pinned, CorpusSpec]:
    """The corpus spec with its dataset and decoding tokenizer pinned (commit, or local copy)."""
    fields = dataclasses.asdict(corpus)
    if not fields.get("dataset") or not fields.get("tokenized_with"):
        raise PipelineError("the importer needs a pre-tokenized corpus (corpus=govreport_paper)")
    data = pin(str(fields["dataset"]), fields.get("revision"), "dataset", "corpus.dataset")
    decoder = pin(
        str(fields["tokenized_with"]), fields.get("tokenizer_revision"), "model", "corpus.tokenized_with"
    )
    fields |= {
        "dataset": data.location,
        "revision": data.revision,
        "tokenized_with": decoder.location,
        "tokenizer_revision": decoder.revision,
    }
    return data, decoder, CorpusSpec(**fields)


def check_inside(doc: Document, spans: np.ndarray, path: Path) -> None:
    if len(spans) and spans[-1, 1] > len(doc.text):
        a, b = (int(x) for x in spans[spans[:, 1] > len(doc.text)][0])
        raise PipelineError(
            f"{path}: span [{a}, {b}] ends past the end of document {doc.id} ({len(doc.text)} characters): "
            "the texts are not the ones the spans index (data/official-key-text/README.md)"
        )


def document_tables(
    index: int, doc: Document, spans: np.ndarray, offsets: np.ndarray
) -> tuple[dict[str, Any], pa.Table]:
    """The document's row and its spans, with the evaluator tokens inside each span."""
    starts, ends = spans[:, 0], spans[:, 1]
    key = hard_key_mask(offsets, starts, ends)
    owner = np.searchsorted(starts, offsets[key, 0], side="right") - 1
    counts = np.bincount(owner, minlength=len(spans)) if len(spans) else np.zeros(0, dtype=np.int64)
    row = {
        "doc_id": doc.id,
        "doc_index": index,
        "text": doc.text,
        "sha256": doc.sha256,
        "source_sha256": doc.sha256,
        "n_chars": len(doc.text),
        "n_source_chars": len(doc.text),
        "n_tokens": len(offsets),
        "truncated": False,
        "n_key_tokens": int(key.sum()),
        "n_spans": len(spans),
        "offsets_from": "tokenizer",
    }
    table = table_from_columns(
        SPANS_SCHEMA,
        {
            "doc_id": [doc.id] * len(spans),
            "span_index": np.arange(len(spans), dtype=np.int32),
            "char_start": starts.astype(np.int32),
            "char_end": ends.astype(np.int32),
            "n_tokens": counts.astype(np.int32),
        },
    )
    return row, table


def settings_record(
    options: ImportOptions,
    definition: KeyTokenDefinition,
    spec: CorpusSpec,
    docs: list[Document],
    sources: dict[str, Any],
) -> dict[str, Any]:
    """The manifest's ``settings``: the key-token definition the spans were computed with (no gamma:
    key spans only, no soft weights), the evaluator, where the spans and the texts came from."""
    official = options.official
    files = [p for p in locate_input(options.spans_dir).iterdir() if SLICE.fullmatch(p.name)]
    return {
        **definition.record(),
        "gamma": None,
        "add_bos": True,  # the evaluator's default special tokens, as the official code
        "evaluator": {
            "spec": str(official.evaluator),
            "name": str(official.folder),
            "tokenizer": sources["tokenizer"],
        },
        "corpus": {
            **{k: getattr(spec, k) for k in ("name", "split", "min_tokenized_len", "max_ids", "limit")},
            "dataset": sources["corpus"],
            "tokenized_with": sources["decoder"],
        },
        "source": {
            **options.source,
            "evaluator_folder": str(official.folder),
            "files_sha256": json_sha256({p.name: file_sha256(p) for p in files}),
        },
        "documents": [{"doc_id": d.id, "source_sha256": d.sha256} for d in docs],
    }


def existing_same(root: Path, fingerprint: str) -> dict[str, Any] | None:
    """The manifest when this exact artifact is already there; an error when another one is. One
    whose manifest does not read is imported anew (its error advises it)."""
    try:
        recorded = read_record(root / MANIFEST)
    except DamagedRecord as exc:
        print(f"note: the artifact there does not load, so it is imported anew ({exc})")
        return None
    if recorded is None:
        return None
    found = recorded.get("fingerprint")
    if found != fingerprint:
        raise PipelineError(
            f"{root} holds another artifact (fingerprint {str(found)[:12]}): pass name=<new name> to keep "
            "both, or delete that directory"
        )
    print(f"{root} is complete with these inputs: nothing to do")
    return recorded
