"""The Python API, for a model that is already in memory (a notebook, a training job).

    from pipeline.api import find_key_tokens, score

    result = score(model, tokenizer, "artifacts/keytokens/<name>")   # or hf://datasets/<org>/<name>
    result.longppl, result.ppl, result.longppl_soft, result.documents

``score`` is the score call of `make score` (``pipeline.score.engine.score``) on a model in memory:
the same numbers, settings and defaults; the model is any causal LM with a Hugging Face interface,
on any device, put in eval mode while it is scored. ``find_key_tokens`` runs the keytokens stage on
texts with an evaluator in memory and returns its tables in memory (``save_key_tokens`` writes them
as an artifact). Settings are keyword arguments named as the commands' settings (``K=2048``,
``context_limit=4096``, ``head_chunk=512``), or whole ``KeyTokenDefinition``, ``Compute`` and
``ScoreSettings`` objects; bad values are a PipelineError, as on the command line. Also here:
``compute_longppl`` (the drop-in for the official package, ``pipeline.api.dropin``),
``LongPPLCallback`` (``pipeline.api.callback``), ``load_model``, and ``answer_gains`` (LooGLE's
long-dependency target, on an artifact with questions).

Layer: api. May import: every layer below (foundation, settings, inputs, contract, stages) and the api
layer (``api``, ``lmeval``); never a report.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from tqdm.auto import tqdm

from pipeline.artifact.reader import load_artifact, open_artifact
from pipeline.artifact.schema import DOCUMENTS_SCHEMA, MANIFEST, PER_TOKEN, KeyTokenArtifact, new_manifest
from pipeline.artifact.shards import Sharding
from pipeline.artifact.writer import check_output, write_artifact
from pipeline.definition import KeyTokenDefinition
from pipeline.errors import PipelineError
from pipeline.jobs import recipe
from pipeline.jobs.recipe import Job, JobResult
from pipeline.jobs.score import ScoreJob
from pipeline.keytokens.selection import STAGE_COMPUTE, Documents, Selection, document_records, select
from pipeline.keytokens.tables import keytoken_tables
from pipeline.models.loading import HeldModel, eval_mode, in_memory, load_model
from pipeline.models.logprobs import scorer_for
from pipeline.provenance import library_versions
from pipeline.score.engine import ScoreResult
from pipeline.settings import Compute, ScoreSettings, field_names, parse
from pipeline.text.corpus import CorpusSpec, Document, check_unicode

if TYPE_CHECKING:
    from pipeline.loogle.evidence.answer_gain import AnswerGain

__all__ = [
    "AnswerGain",
    "Compute",
    "Job",
    "JobResult",
    "KeyTokenDefinition",
    "LongPPLCallback",
    "ScoreResult",
    "ScoreSettings",
    "answer_gains",
    "compute_longppl",
    "find_key_tokens",
    "load_model",
    "run",
    "save_key_tokens",
    "score",
]
KeyTokens = str | Path | KeyTokenArtifact
IN_MEMORY = "in-memory"
LAZY = {  # imported on first use: they import transformers' Trainer or caches, which no command's start needs
    "compute_longppl": "pipeline.api.dropin",
    "LongPPLCallback": "pipeline.api.callback",
    "AnswerGain": "pipeline.loogle.evidence.answer_gain",
}
# A model in memory is already loaded: these compute settings are its own, not options.
LOADED = ("dtype", "device", "cache_dir")


def __getattr__(name: str) -> Any:
    if name not in LAZY:
        raise AttributeError(f"module 'pipeline.api' has no attribute {name!r}")
    return getattr(importlib.import_module(LAZY[name]), name)


def run(job: Job, warn: Callable[[str], None] | None = None) -> JobResult:
    """Run a job (``pipeline.jobs``: ``ScoreJob``, ``LadderJob``, ``CurveJob``, ``LoogleJob``), as every
    command does: the project's ``simple_evaluate``. ``warn`` says each warning (default: a
    ``warning:`` line on stderr)."""
    return recipe.run(job, warn)


def score(
    model: Any,
    tokenizer: Any,
    keytokens: KeyTokens,
    *,
    documents: int | Sequence[str] | None = None,
    model_name: str | None = None,
    results_file: str | Path | None = None,
    progress: bool = False,
    settings: ScoreSettings | None = None,
    compute: Compute | None = None,
    **options: Any,
) -> ScoreResult:
    """PPL, LongPPL and LongPPL-soft of an in-memory model against a key-token artifact, per document
    and over the corpus: `make score`'s numbers (its job, ``pipeline.jobs.score.ScoreJob``). ``options``:
    fields of ``ScoreSettings`` (``add_bos``, ``context_limit``, ``allow_truncation``, ``grid``) and of
    ``Compute`` (``head_dtype``, ``head_chunk``, ``vocab_tile``, ``window_batch_tokens``).
    ``documents``: score only the first N, or these ids; ``results_file``: also append the result line
    there, as `make score` does (``model_name`` names the model on the leaderboard; the line records
    the model's identity, a hash of its parameters and tokenizer, and the documents when they are not
    all of the artifact's)."""
    settings, compute = with_options(
        options, given(settings, ScoreSettings(), "settings"), given(compute, Compute(), "compute")
    )
    job = ScoreJob(
        model=HeldModel(model, tokenizer, model_name),
        artifact=keytokens if isinstance(keytokens, KeyTokenArtifact) else as_path(keytokens, "keytokens"),
        settings=settings,
        compute=compute,
        results=None if results_file is None else Path(as_path(results_file, "results_file")),
        documents=documents,
        progress=progress,
        results_setting="results_file",
    )
    return run(job, python_warning).value


def python_warning(text: str) -> None:
    warnings.warn(text, stacklevel=4)


def find_key_tokens(
    texts: str | Sequence[str] | Mapping[str, str],
    evaluator_model: Any,
    evaluator_tokenizer: Any,
    *,
    evaluator_name: str | None = None,
    progress: bool = False,
    definition: KeyTokenDefinition | None = None,
    compute: Compute | None = None,
    **options: Any,
) -> KeyTokenArtifact:
    """The keytokens stage on texts with an evaluator in memory: the artifact's tables (``documents``,
    ``tokens``, ``spans``, pyarrow) and manifest, in memory, as `make keytokens` computes them.
    ``options``: fields of ``KeyTokenDefinition`` (``K``, ``d``, ``alpha``, ``beta``, ``gamma``,
    ``short_window_bos``; the paper's defaults), of ``Compute`` (as for ``score``; the head in
    float32 on CUDA, as the stage) and the documents' (``max_tokens``, ``min_tokens``, ``add_bos``).
    Documents of K tokens or fewer have no key token and are listed in ``manifest["skipped"]``."""
    definition, compute, documents = with_options(
        options,
        given(definition, KeyTokenDefinition(), "definition"),
        given(compute, STAGE_COMPUTE, "compute"),
        Documents(),
    )
    lm = in_memory(evaluator_model, evaluator_tokenizer, evaluator_name)
    scorer = scorer_for(lm, compute)  # first: a compiled model's numerics are recorded
    selection = select(as_documents(texts), lm, definition, documents, CorpusSpec(name=IN_MEMORY), compute)
    bos_id = lm.bos_token_id if documents.add_bos else None
    with eval_mode(evaluator_model):
        scorer.check_against_full_forward()
        parts = [
            keytoken_tables(scorer, item, definition, bos_id)
            for item in tqdm(selection.prepared, desc="documents", unit="doc", disable=not progress)
        ]
    return in_memory_artifact(selection, parts)


def answer_gains(
    model: Any,
    tokenizer: Any,
    keytokens: KeyTokens,
    limits: Sequence[int],
    *,
    tasks: Sequence[str] = ("longdep_qa",),
    model_name: str | None = None,
    compute: Compute | None = None,
    **options: Any,
) -> list[AnswerGain]:
    """The answer gain of each LooGLE question of an artifact with questions (``corpus=loogle_sample``
    or ``corpus=loogle``) at each context limit in tokens, as `make validate`'s LooGLE target computes
    it (``pipeline.loogle.evidence.answer_gain``): log P(answer | document, question)
    - log P(answer | question), a question counted only with its located evidence inside the kept
    context. ``answer_gain.summary`` of the list gives the means per limit and question type.
    ``options``: fields of ``Compute``."""
    from pipeline.loogle.evidence import answer_gain  # LooGLE's decoding code only where it is used

    (compute,) = with_options(options, given(compute, Compute(), "compute"))
    lm = in_memory(model, tokenizer, model_name)
    artifact = opened(keytokens)
    questions, texts = answer_gain.questions_of(artifact, tasks)
    scorer = scorer_for(lm, compute)
    with eval_mode(model):
        scorer.check_against_full_forward()  # as every stage, before its first real pass
        return answer_gain.answer_gains(lm.tokenizer, scorer, questions, texts, list(limits))


def save_key_tokens(
    artifact: KeyTokenArtifact, directory: str | Path, *, shard_rows: int | None = None
) -> Path:
    """Write an artifact held in memory (``find_key_tokens``, or one loaded) as an artifact directory that
    `make score` reads; returns the directory. ``shard_rows``: None, one file per table; a number, the
    tables in shards of at most that many rows, cut at document boundaries (the same artifact:
    ``pipeline.artifact.shards``)."""
    sharding = parse(Sharding, {"shard_rows": shard_rows})
    root = Path(as_path(directory, "directory"))
    check_output(root, "directory")
    if (root / MANIFEST).exists():
        raise PipelineError(f"{root} already holds an artifact: choose another directory")
    write_artifact(root, artifact, sharding.shard_rows)
    load_artifact(root)  # verifies as any artifact
    return root


def opened(keytokens: KeyTokens) -> KeyTokenArtifact:
    """An artifact in memory as it is; a path or Hub address opened (and checked)."""
    return open_artifact(
        keytokens if isinstance(keytokens, KeyTokenArtifact) else as_path(keytokens, "keytokens")
    )


def as_path(value: Any, name: str) -> Any:
    """A location argument: a ``str`` (a path or ``hf://datasets/...``) as given, an ``os.PathLike`` as a
    Path; anything else (bytes, a number) is an error, not ``"b'...'"`` taken as a folder name."""
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike) and isinstance(os.fspath(value), str):
        return Path(value)
    raise PipelineError(f"{name} is {type(value).__name__} ({value!r:.80}): pass a str or a pathlib.Path")


def given(value: Any, default: Any, name: str) -> Any:
    """A settings argument (``settings=``, ``compute=``, ``definition=``): ``default`` for None, else an
    object of the default's type (a dict is no ``ScoreSettings``: its fields go as keyword arguments)."""
    if value is None:
        return default
    if not isinstance(value, type(default)):
        kind = type(default).__name__
        raise PipelineError(
            f"{name} is {type(value).__name__} ({value!r:.80}): pass a {kind}, or its settings as keyword "
            f"arguments ({', '.join(field_names(type(default))[:2])}, ...)"
        )
    return value


def with_options(options: dict[str, Any], *defaults: Any) -> list[Any]:
    """Each of ``defaults`` (settings objects) with the ``options`` named by its fields, checked as
    the command line checks them; an option no object has is an error that lists them."""
    known = [field_names(type(d)) for d in defaults]
    unknown = sorted((set(options) - {n for names in known for n in names}) | (set(options) & set(LOADED)))
    if unknown:
        allowed = sorted({n for names in known for n in names} - set(LOADED))
        raise PipelineError(f"unknown setting {unknown[0]!r}: the settings here are {', '.join(allowed)}")
    out = []
    for default, names in zip(defaults, known, strict=True):
        values = {**dataclasses.asdict(default), **{k: v for k, v in options.items() if k in names}}
        out.append(parse(type(default), values) if set(options) & set(names) else default)
    return out


def as_documents(texts: str | Sequence[str] | Mapping[str, str]) -> list[Document]:
    """One text, a list (ids doc-00000, ...) or a mapping id -> text; each text a str."""
    if isinstance(texts, str):
        texts = [texts]
    if isinstance(texts, (bytes, bytearray)) or not isinstance(texts, (Sequence, Mapping)):
        raise PipelineError(
            f"texts is {type(texts).__name__}: pass a str, a list of str or a mapping id -> str"
        )
    items = (
        texts.items() if isinstance(texts, Mapping) else ((f"doc-{i:05d}", t) for i, t in enumerate(texts))
    )
    items = list(items)
    documents = [Document(id=str(doc_id), text=text) for doc_id, text in items]
    seen: dict[str, Any] = {}
    for doc_id, _ in items:
        if str(doc_id) in seen:
            raise PipelineError(
                f"texts has the ids {seen[str(doc_id)]!r} and {doc_id!r}, one id '{doc_id}' as text: give "
                "each document its own id"
            )
        seen[str(doc_id)] = doc_id
    bad = next((d for d in documents if not isinstance(d.text, str)), None)
    if bad is not None:
        decode = (
            ": decode it first (text.decode('utf-8'))" if isinstance(bad.text, (bytes, bytearray)) else ""
        )
        raise PipelineError(f"text of document '{bad.id}' is {type(bad.text).__name__}, not str{decode}")
    for doc in documents:
        check_unicode(doc.text, f"text of document '{doc.id}'")
    return documents


def in_memory_artifact(
    selection: Selection, parts: list[tuple[dict, pa.Table, pa.Table]]
) -> KeyTokenArtifact:
    """The artifact of the selected documents from their tables (``keytoken_tables``), in memory:
    the manifest that `make keytokens` writes, without files."""
    extra = {
        "documents": document_records(selection.prepared),
        "skipped": selection.skipped,
        "libraries": library_versions(),
    }
    return KeyTokenArtifact(
        root=Path(IN_MEMORY),
        manifest=new_manifest(PER_TOKEN, selection.fingerprint, selection.record, extra),
        documents=pa.Table.from_pylist([p[0] for p in parts], DOCUMENTS_SCHEMA),
        tokens=pa.concat_tables([p[1] for p in parts]),
        spans=pa.concat_tables([p[2] for p in parts]),
        origin={"memory": IN_MEMORY},
    )
