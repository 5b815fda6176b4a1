"""The Python API, for a model that is already in memory (a notebook, a training job).

    from pipeline.api import score, find_key_tokens

    result = score(model, tokenizer, keytokens="artifacts/keytokens/<name>")   # or hf://datasets/<org>/<name>
    result.longppl, result.ppl, result.longppl_soft, result.documents

``score`` gives the numbers `make score` gives (the same engine, settings and defaults); the model is
any causal LM with a Hugging Face interface, on any device, put in eval mode while it is scored.
``find_key_tokens`` runs the keytokens stage on texts with an evaluator in memory and returns its
tables in memory (``save_key_tokens`` writes them as an artifact). The drop-in for the official
package's ``compute_longppl`` is ``pipeline.dropin``; the ``TrainerCallback`` is ``pipeline.callback``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from tqdm.auto import tqdm

from pipeline import keytokens, results
from pipeline.artifact_writer import write_artifact
from pipeline.artifacts import (
    DOCUMENTS_SCHEMA,
    HUB_PREFIX,
    PER_TOKEN,
    SCHEMA_VERSION,
    ArtifactDocument,
    KeyTokenArtifact,
    iter_documents,
    load_artifact,
    locate_artifact,
)
from pipeline.corpus import CorpusSpec, Document
from pipeline.errors import PipelineError
from pipeline.keytokens.run import Selection, document_records, select
from pipeline.keytokens.settings import KeyTokenSettings
from pipeline.keytokens.tables import keytoken_tables
from pipeline.logprobs import DEFAULT_HEAD_CHUNK, DEFAULT_VOCAB_TILE, TargetScorer
from pipeline.models import LoadedModel, ModelChoice, ModelSource, resolve_head_dtype
from pipeline.provenance import library_versions
from pipeline.score import ScoreSettings, corpus_summary, score_document, settings_dict, unavailable_metrics

KeyTokens = str | Path | KeyTokenArtifact
IN_MEMORY = "in-memory"


@dataclass
class ScoreResult:
    """A model's scores on an artifact: corpus values and per-document values, as in the results
    file (``pipeline.results``); ``corpus["unavailable"]`` says why a null metric is null."""

    artifact: str
    fingerprint: str
    corpus: dict[str, Any]
    documents: list[dict[str, Any]]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def ppl(self) -> float | None:
        return self.corpus["ppl"]

    @property
    def longppl(self) -> float | None:
        return self.corpus["longppl"]

    @property
    def longppl_soft(self) -> float | None:
        return self.corpus["longppl_soft"]


def in_memory(model: Any, tokenizer: Any, name: str | None = None) -> LoadedModel:
    """A model and tokenizer that are already loaded, as the pipeline's ``LoadedModel``."""
    if tokenizer is None:
        raise PipelineError("pass the model's tokenizer too: the key spans are mapped onto its tokens")
    parameter = next(model.parameters())
    spec = name or getattr(model, "name_or_path", None) or type(model).__name__
    source = ModelSource(spec=str(spec), kind="memory", path="")
    source.attn_implementation = getattr(model.config, "_attn_implementation", None)
    return LoadedModel(model, tokenizer, source, dtype=parameter.dtype, device=parameter.device)


@contextlib.contextmanager
def eval_mode(model: Any) -> Iterator[None]:
    """The model in eval mode (no dropout) for the block, then back in the mode it was in."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def open_keytokens(keytokens: KeyTokens) -> KeyTokenArtifact:
    """An artifact: already loaded, a directory, or ``hf://datasets/<org>/<name>[@revision]``."""
    if isinstance(keytokens, KeyTokenArtifact):
        return keytokens
    spec = str(keytokens)
    path, _ = locate_artifact(spec if spec.startswith(HUB_PREFIX) else str(Path(spec).absolute()))
    return load_artifact(path)


def pick_documents(
    artifact: KeyTokenArtifact, documents: int | Sequence[str] | None
) -> list[ArtifactDocument]:
    """All documents, the first N, or those with these ids (in artifact order)."""
    docs = list(iter_documents(artifact))
    if documents is None:
        return docs
    if isinstance(documents, int):
        return docs[:documents]
    wanted = set(documents)
    unknown = wanted - {d.doc_id for d in docs}
    if unknown:
        raise PipelineError(f"no document {sorted(unknown)[:3]} in artifact {artifact.root.name}")
    return [d for d in docs if d.doc_id in wanted]


def score(
    model: Any,
    tokenizer: Any,
    keytokens: KeyTokens,
    *,
    add_bos: bool = True,
    context_limit: int | None = None,
    allow_truncation: bool = False,
    grid: tuple[tuple[float, float], ...] = keytokens.PAPER_GRID,
    head_chunk: int = DEFAULT_HEAD_CHUNK,
    vocab_tile: int | None = DEFAULT_VOCAB_TILE,
    window_batch_tokens: int = 16384,
    documents: int | Sequence[str] | None = None,
    model_name: str | None = None,
    results_file: str | Path | None = None,
    progress: bool = False,
) -> ScoreResult:
    """PPL, LongPPL and LongPPL-soft of an in-memory model against a key-token artifact, per document
    and over the corpus: `make score`'s numbers (same settings, same defaults). ``documents``: score
    only the first N, or these ids; ``results_file``: also append the result line there, as `make
    score` does (``model_name`` names the model on the leaderboard)."""
    started = time.time()
    artifact = open_keytokens(keytokens)
    settings = ScoreSettings(
        add_bos, context_limit, allow_truncation, tuple(grid), head_chunk, vocab_tile, window_batch_tokens
    )
    lm = in_memory(model, tokenizer, model_name)
    scorer = TargetScorer(model, head_chunk=settings.head_chunk, vocab_tile=settings.vocab_tile)
    docs = pick_documents(artifact, documents)
    with eval_mode(model):
        scorer.check_against_full_forward()
        scores = [
            score_document(lm, scorer, doc, settings)
            for doc in tqdm(docs, desc="documents", unit="doc", disable=not progress)
        ]
    corpus, per_document = corpus_summary(scores), [s.summary() for s in scores]
    if unavailable := unavailable_metrics(artifact):
        corpus["unavailable"] = unavailable
    record = {
        **settings_dict(settings),
        "dtype": str(lm.dtype).removeprefix("torch."),
        "device": str(lm.device),
    }
    if results_file is not None:
        row = results.score_row(
            lm.source.spec, lm, artifact, record, corpus, per_document, time.time() - started
        )
        results.append(Path(results_file), row)
    return ScoreResult(artifact.root.name, artifact.manifest["fingerprint"], corpus, per_document, record)


def as_documents(texts: str | Sequence[str] | Mapping[str, str]) -> list[Document]:
    """One text, a list (ids doc-00000, ...) or a mapping id -> text."""
    if isinstance(texts, str):
        texts = [texts]
    items = (
        texts.items() if isinstance(texts, Mapping) else ((f"doc-{i:05d}", t) for i, t in enumerate(texts))
    )
    return [Document(id=str(doc_id), text=text) for doc_id, text in items]


def find_key_tokens(
    texts: str | Sequence[str] | Mapping[str, str],
    evaluator_model: Any,
    evaluator_tokenizer: Any,
    *,
    K: int = 4096,
    d: int = 1024,
    alpha: float = 2.0,
    beta: float = -2.0,
    gamma: float = 5.0,
    max_tokens: int | None = None,
    min_tokens: int = 0,
    add_bos: bool = True,
    short_window_bos: bool = True,
    head_chunk: int = DEFAULT_HEAD_CHUNK,
    vocab_tile: int | None = DEFAULT_VOCAB_TILE,
    window_batch_tokens: int = 16384,
    head_dtype: str = "auto",
    evaluator_name: str | None = None,
    progress: bool = False,
) -> KeyTokenArtifact:
    """The keytokens stage on texts with an evaluator in memory: the artifact's tables (``documents``,
    ``tokens``, ``spans``, pyarrow) and manifest, in memory, as `make keytokens` computes them.
    Documents of K tokens or fewer have no key token and are listed in ``manifest["skipped"]``."""
    lm = in_memory(evaluator_model, evaluator_tokenizer, evaluator_name)
    settings = in_memory_settings(
        lm,
        K=K,
        d=d,
        alpha=alpha,
        beta=beta,
        gamma=gamma,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        add_bos=add_bos,
        short_window_bos=short_window_bos,
        head_dtype=head_dtype,
        head_chunk=head_chunk,
        vocab_tile=vocab_tile,
        window_batch_tokens=window_batch_tokens,
        progress=progress,
    )
    selection = select(as_documents(texts), lm, settings)
    head = resolve_head_dtype(head_dtype, lm.dtype, lm.device)
    scorer = TargetScorer(evaluator_model, head_chunk=head_chunk, vocab_tile=vocab_tile, head_dtype=head)
    bos_id = lm.bos_token_id if add_bos else None
    with eval_mode(evaluator_model):
        scorer.check_against_full_forward()
        parts = [
            keytoken_tables(scorer, item, settings, bos_id)
            for item in tqdm(selection.prepared, desc="documents", unit="doc", disable=not progress)
        ]
    return in_memory_artifact(selection, parts)


def in_memory_settings(lm: LoadedModel, **options: Any) -> KeyTokenSettings:
    """The keytokens stage's settings for an evaluator in memory: ``options`` (the key-token
    definition and compute knobs) and the model's own dtype and device; no corpus file, no output."""
    return KeyTokenSettings(
        evaluator=ModelChoice(spec=lm.source.spec),
        corpus=CorpusSpec(name=IN_MEMORY),
        num_documents=None,
        dtype=str(lm.dtype).removeprefix("torch."),
        device=str(lm.device),
        cache_dir=None,
        name=IN_MEMORY,
        output_dir=".",
        **options,
    )


def in_memory_artifact(
    selection: Selection, parts: list[tuple[dict, pa.Table, pa.Table]]
) -> KeyTokenArtifact:
    """The artifact of the selected documents from their tables (``keytoken_tables``), in memory:
    the manifest that `make keytokens` writes, without files."""
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "kind": PER_TOKEN,
        "fingerprint": selection.fingerprint,
        "settings": selection.record,
        "documents": document_records(selection.prepared),
        "skipped": selection.skipped,
        "libraries": library_versions(),
        "files": {},
    }
    return KeyTokenArtifact(
        root=Path(IN_MEMORY),
        manifest=manifest,
        documents=pa.Table.from_pylist([p[0] for p in parts], DOCUMENTS_SCHEMA),
        tokens=pa.concat_tables([p[1] for p in parts]),
        spans=pa.concat_tables([p[2] for p in parts]),
    )


def save_key_tokens(artifact: KeyTokenArtifact, directory: str | Path) -> Path:
    """Write an artifact held in memory (``find_key_tokens``) as an artifact directory that `make score`
    reads; returns the directory."""
    root = Path(directory)
    if (root / "manifest.json").exists():
        raise PipelineError(f"{root} already holds an artifact: choose another directory")
    tables = {"documents": artifact.documents, "spans": artifact.spans}
    if artifact.tokens is not None:
        tables["tokens"] = artifact.tokens
    extra = {k: v for k, v in artifact.manifest.items() if k not in ("schema_version", "kind", "files")}
    extra.pop("fingerprint", None)
    extra.pop("settings", None)
    write_artifact(root, artifact.kind, tables, artifact.settings, artifact.manifest["fingerprint"], extra)
    load_artifact(root)  # verifies as any artifact
    return root
