"""The score call: PPL, LongPPL, LongPPL-soft and bits per byte of a loaded model against a
key-token artifact, per document and over the corpus.

``score`` is what `make score`, the Python API (``pipeline.api.score``), the training callback,
`make validate` and `make longce-demo` run; ``score_against`` scores one model pass of each text
against several artifacts of the same texts (several evaluators' key tokens); ``score_limits`` scores
the documents ``tokenize`` took at several context limits at once (`make ladder`), each limit's result
what ``score`` gives at that ``context_limit``, to every digit.

What does not depend on the context limit is computed once per document and shared by the limits: the
tokenization, the alignment of the key spans and soft weights onto the tokens, the byte and character
counts. A document whose sequence fits a limit is, at that limit, the full-context pass
(``context_limited_logprobs`` runs that very pass): its log-probs are the full pass's, not computed
again. Every other (document, limit) runs all of the limit's windows: PPL, LongPPL-soft and bits per
byte need every token.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from pipeline.artifact.reader import ArtifactDocument, iter_documents
from pipeline.artifact.schema import NEEDS_TOKEN_VALUES, KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.models.loading import LoadedModel, dtype_name, eval_mode
from pipeline.models.logprobs import TargetScorer, scorer_for
from pipeline.models.pairing import worse_than_uniform
from pipeline.models.placement import gpu_record
from pipeline.results.keys import documents_record
from pipeline.score.documents import (
    ModelSequence,
    ModelTokens,
    TokenAlignment,
    align_tokens,
    document_score,
    fitted_sequence,
    model_logprobs,
    score_tokens,
    sequence_logprobs,
    whole_sequence,
)
from pipeline.score.sums import DocumentScore, corpus_summary
from pipeline.settings import Compute, ScoreSettings

Documents = int | Sequence[str] | None  # all, the first N, or these ids
Limit = int | None  # a context limit in tokens; None: full context


@dataclass
class ScoreResult:
    """A model's scores on an artifact: corpus values and per-document values, as in the results
    file (``pipeline.results.score``); ``corpus["unavailable"]`` says why a null metric is null."""

    artifact: str  # the artifact's name
    fingerprint: str
    corpus: dict[str, Any]
    documents: list[dict[str, Any]]
    settings: dict[str, Any] = field(default_factory=dict)  # score and compute settings, resolved
    seconds: float = 0.0
    key_tokens: KeyTokenArtifact | None = field(default=None, repr=False)  # the artifact scored against
    warnings: list[str] = field(default_factory=list)  # what looks wrong with the numbers (not stored)

    @property
    def ppl(self) -> float | None:
        return self.corpus["ppl"]

    @property
    def longppl(self) -> float | None:
        return self.corpus["longppl"]

    @property
    def longppl_soft(self) -> float | None:
        return self.corpus["longppl_soft"]


def score(
    artifact: KeyTokenArtifact,
    lm: LoadedModel,
    settings: ScoreSettings,
    compute: Compute,
    *,
    documents: Documents = None,
    progress: bool = False,
) -> ScoreResult:
    """``lm`` against ``artifact``: one forward pass per document (windows with a context limit)."""
    return score_against([artifact], lm, settings, compute, documents=documents, progress=progress)[0]


def score_against(
    artifacts: list[KeyTokenArtifact],
    lm: LoadedModel,
    settings: ScoreSettings,
    compute: Compute,
    *,
    documents: Documents = None,
    progress: bool = False,
) -> list[ScoreResult]:
    """``lm`` against each artifact; a text that several artifacts hold runs through the model once.
    The model is in eval mode throughout, then back in the mode it was in."""
    started = time.time()
    scorer = scorer_for(lm, compute)
    chosen = [pick_documents(a, documents) for a in artifacts]
    texts = {d.text for docs in chosen for d in docs}
    bar = tqdm(total=len(texts), desc="documents", unit="doc", disable=not progress)
    cache: dict[str, ModelTokens] = {}
    with eval_mode(lm.model), bar:
        scorer.check_against_full_forward()
        scores = [[score_tokens(doc, cached(lm, scorer, doc, settings, cache, bar), settings) for doc in docs]
                  for docs in chosen]  # fmt: skip
    record = settings_record(settings, compute, lm, scorer)
    results = [
        result(artifact, per_document, record, time.time() - started)
        for artifact, per_document in zip(artifacts, scores, strict=True)
    ]
    warn(results, lm, scorer)
    return results


def warn(results: list[ScoreResult], lm: LoadedModel, scorer: TargetScorer) -> None:
    """Adds to each result what looks wrong with its numbers."""
    for r in results:
        if warning := worse_than_uniform(r.ppl, scorer.vocab_size, lm.source.spec):
            r.warnings.append(warning)


@dataclass(frozen=True)
class Tokenized:
    """The documents chosen and the evaluated model's tokens of each whole text (``tokenize``): what
    ``score_limits`` shares across its context limits."""

    artifact: KeyTokenArtifact
    settings: ScoreSettings
    docs: list[ArtifactDocument]
    sequences: list[ModelSequence]

    @property
    def doc_ids(self) -> list[str]:
        return [d.doc_id for d in self.docs]

    @property
    def lengths(self) -> list[int]:
        """Per document, the tokens of its whole sequence (the BOS included)."""
        return [len(s.seq) for s in self.sequences]

    @property
    def n_prefix(self) -> int:
        """1 when a BOS is prepended, else 0."""
        return self.sequences[0].n_prefix if self.sequences else 0


@dataclass
class LimitScores:
    """One model on one artifact at several context limits (``score_limits``): per limit, the result
    that ``score`` gives at that ``context_limit`` (its ``seconds``: that limit's model time)."""

    limits: tuple[Limit, ...]
    results: list[ScoreResult]
    key_nll: np.ndarray  # (documents, limits): the key tokens' NLL sum
    key_n: np.ndarray  # (documents,): the key tokens (the same at every limit)
    key_limited: np.ndarray  # (documents, limits): key tokens with less context than all before them
    copied: list[int]  # per limit, documents whose sequence fits it (the full pass's log-probs)


def tokenize(
    artifact: KeyTokenArtifact, lm: LoadedModel, settings: ScoreSettings, *, documents: Documents = None
) -> Tokenized:
    """The chosen documents of ``artifact`` in ``lm``'s tokens, whole, for ``score_limits`` (which sets
    ``context_limit`` per limit and scores whole documents)."""
    if settings.context_limit is not None or settings.allow_truncation:
        raise PipelineError(
            "several context limits score whole documents: leave context_limit and allow_truncation unset"
        )
    docs = pick_documents(artifact, documents)
    return Tokenized(artifact, settings, docs, [whole_sequence(lm, d, settings.add_bos) for d in docs])


def score_limits(
    texts: Tokenized, lm: LoadedModel, compute: Compute, limits: Sequence[Limit], *, progress: bool = False
) -> LimitScores:
    """``lm`` against the documents of ``texts`` at each context limit (None: full context), each limit
    checked as ``score`` checks its ``context_limit``. The model is in eval mode throughout, then back
    in the mode it was in."""
    limits = tuple(limits)
    if not limits:
        raise PipelineError("no context limit to score at: give at least one (None: full context)")
    settings = [replace(texts.settings, context_limit=w) for w in limits]
    for doc, sequence in zip(texts.docs, texts.sequences, strict=True):
        for at_limit in settings:  # `make score`'s checks: the limit, or the whole text, fits the model
            fitted_sequence(lm, doc.doc_id, sequence, at_limit)
    scorer = scorer_for(lm, compute)
    tally = _Tally(len(limits))
    passes = len(texts.docs) * len(limits)
    bar = tqdm(total=passes, desc="document x limit", unit="pass", disable=not progress)
    with eval_mode(lm.model), bar:
        scorer.check_against_full_forward()
        for doc, sequence in zip(texts.docs, texts.sequences, strict=True):
            limits_document(lm, scorer, doc, sequence, limits, texts.settings, tally, bar)
    records = [settings_record(at_limit, compute, lm, scorer) for at_limit in settings]
    results = [
        result(texts.artifact, scores, record, seconds)
        for scores, record, seconds in zip(tally.scores, records, tally.seconds, strict=True)
    ]
    warn(results, lm, scorer)
    return LimitScores(
        limits,
        results,
        key_nll=np.array([[s[i].key.nll for s in tally.scores] for i in range(len(texts.docs))]),
        key_n=np.array([s.key.n for s in tally.scores[-1]]),
        key_limited=np.array(tally.limited, dtype=np.int64),
        copied=tally.copied,
    )


@dataclass
class _Tally:
    """What the limits gather document by document."""

    n_limits: int
    scores: list[list[DocumentScore]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    copied: list[int] = field(default_factory=list)
    limited: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.scores = [[] for _ in range(self.n_limits)]
        self.seconds, self.copied = [0.0] * self.n_limits, [0] * self.n_limits


def limits_document(
    lm: LoadedModel,
    scorer: TargetScorer,
    doc: ArtifactDocument,
    sequence: ModelSequence,
    limits: tuple[Limit, ...],
    settings: ScoreSettings,
    tally: _Tally,
    bar: Any,
) -> None:
    """One document at every limit: the full pass first where a limit takes it (its time is full
    context's; its alignment serves every limit), then each limit's windows, or the full pass's
    log-probs where the sequence fits the limit."""
    fits = [w is None or len(sequence.seq) <= w for w in limits]
    full = aligned = None
    if any(fits):
        started = time.time()
        full = sequence_logprobs(lm, scorer, sequence, None, doc.doc_id)
        tally.seconds[limits.index(None) if None in limits else fits.index(True)] += time.time() - started
        aligned = align_tokens(doc, full, settings)
    limited = []
    for r, limit in enumerate(limits):
        started = time.time()
        tokens = full if fits[r] else sequence_logprobs(lm, scorer, sequence, limit, doc.doc_id)
        if aligned is None:
            aligned = align_tokens(doc, tokens, settings)
        tally.scores[r].append(document_score(doc.doc_id, tokens, aligned))
        tally.seconds[r] += time.time() - started
        tally.copied[r] += int(fits[r] and limit is not None)
        limited.append(0 if fits[r] else int((key_positions(aligned, sequence) >= limit).sum()))
        bar.update()
    tally.limited.append(limited)


def key_positions(aligned: TokenAlignment, sequence: ModelSequence) -> np.ndarray:
    """The positions in the sequence of the key tokens (each predicted from the tokens before it)."""
    return np.flatnonzero(aligned.scored)[aligned.key] + sequence.n_prefix


def cached(
    lm: LoadedModel,
    scorer: TargetScorer,
    doc: ArtifactDocument,
    settings: ScoreSettings,
    cache: dict[str, ModelTokens],
    bar: Any,
) -> ModelTokens:
    """The model's log-probs of ``doc.text``, computed once per text."""
    if doc.text not in cache:
        cache[doc.text] = model_logprobs(lm, scorer, doc, settings)
        bar.update()
    return cache[doc.text]


def result(artifact: KeyTokenArtifact, scores: list, record: dict[str, Any], seconds: float) -> ScoreResult:
    corpus = corpus_summary(scores)
    if unavailable := unavailable_metrics(artifact):
        corpus["unavailable"] = unavailable  # null values, with the reason (never zeros)
    scored = documents_record([s.doc_id for s in scores], artifact.documents.num_rows)
    return ScoreResult(
        artifact=artifact.root.name,
        fingerprint=artifact.manifest["fingerprint"],
        corpus=corpus,
        documents=[s.summary() for s in scores],
        settings={**record, **scored},  # a run on part of the artifact names the documents it scored
        seconds=seconds,
        key_tokens=artifact,
    )


def pick_documents(artifact: KeyTokenArtifact, documents: Documents) -> list[ArtifactDocument]:
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


def settings_record(
    settings: ScoreSettings, compute: Compute, lm: LoadedModel, scorer: TargetScorer
) -> dict[str, Any]:
    """What a result records of how it was computed: the score settings, the head blocks and window
    batches, the resolved dtypes and where the model ran (on a GPU: which, ``gpu_record``)."""
    return {
        **settings.record(),
        **compute.record(),
        "dtype": dtype_name(lm.dtype),
        "head_dtype": dtype_name(scorer.head_dtype),
        "device": lm.placement,
        **gpu_record(lm.model),
    }


def unavailable_metrics(artifact: KeyTokenArtifact) -> dict[str, str]:
    """Why a metric is null for this artifact, by name (empty when every metric is computed)."""
    if artifact.has_token_values:
        return {}
    return {
        "longppl_soft": f"LongPPL-soft {NEEDS_TOKEN_VALUES}",
        "grid": f"the alpha/beta grid {NEEDS_TOKEN_VALUES}",
    }
