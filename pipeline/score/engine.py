"""The score engine: every metric of the registry (``pipeline.metric_registry``: PPL, LongPPL,
LongPPL-soft, bits per byte) of a loaded model against a key-token artifact, per document and over the
corpus, with one loop over documents.

``texts_of`` takes the chosen documents of an artifact and tokenizes each distinct text once, whole.
``passes`` is the one loop: for each text and each context limit, the model's log-probs (one forward
pass, or windows of the limit). ``score_texts`` carries the artifact's key spans and soft weights onto
those tokens and sums every metric at each limit (the ladder's rungs); ``score`` is one context limit,
the call `make score` and the Python API make. What does not depend on the context limit is computed
once per text and shared by the limits: the tokenization, the alignment of the key spans onto the
tokens, the byte and character counts. A text whose sequence fits a limit is, at that limit, the
full-context pass (``context_limited_logprobs`` runs that very pass): its log-probs are the full
pass's, not computed again. Texts without an artifact (lm-eval's requests: ``plain_texts``) take the
same loop (``logprobs``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from pipeline import metric_registry
from pipeline.artifact.reader import ArtifactDocument, iter_documents
from pipeline.artifact.schema import NEEDS_TOKEN_VALUES, KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.models import compilation
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


@dataclass(frozen=True)
class Text:
    """One text to score: its id (for messages) and the text itself (``doc_id``/``text``, as an
    artifact's documents and lm-eval's requests have them)."""

    doc_id: str
    text: str


@dataclass(frozen=True)
class Texts:
    """The documents chosen of an artifact and the model's tokens of each distinct text, whole
    (``texts_of``): what every context limit shares."""

    settings: ScoreSettings
    artifact: KeyTokenArtifact | None  # None: texts without an artifact (``plain_texts``)
    docs: list[ArtifactDocument]  # the chosen documents
    texts: list[Text]  # the distinct texts, in order of first appearance
    sequences: list[ModelSequence]  # per distinct text, whole

    @property
    def lengths(self) -> list[int]:
        """Per document, the tokens of its whole sequence (the BOS included)."""
        index = {t.text: i for i, t in enumerate(self.texts)}
        return [len(self.sequences[index[d.text]].seq) for d in self.docs]

    @property
    def n_prefix(self) -> int:
        """1 when a BOS is prepended, else 0."""
        return self.sequences[0].n_prefix if self.sequences else 0


@dataclass
class Scores:
    """The results of ``score_texts``: per limit the ``ScoreResult`` that ``score`` gives at that
    ``context_limit``, its model time and the documents whose sequence fits it (the full pass's
    log-probs); per document and limit the key tokens' NLL sum and how many of them the limit cuts off
    from some of the context before them."""

    limits: tuple[Limit, ...]
    results: list[ScoreResult]  # per limit
    key_nll: np.ndarray  # (documents, limits)
    key_n: np.ndarray  # (documents,) the key tokens (the same at every limit)
    key_limited: np.ndarray  # (documents, limits)
    seconds: list[float]  # per limit
    copied: list[int]  # per limit, documents whose sequence fits it


Scoring = TargetScorer | Compute  # the model's scorer, or the compute settings to build it with


def score(
    artifact: KeyTokenArtifact,
    lm: LoadedModel,
    settings: ScoreSettings,
    scoring: Scoring,
    *,
    documents: Documents = None,
    progress: bool = False,
) -> ScoreResult:
    """``lm`` against ``artifact`` at ``settings.context_limit``: one forward pass per document
    (windows with a context limit)."""
    texts = texts_of(artifact, lm, settings, documents=documents)
    return score_texts(texts, lm, scoring, progress=progress).results[0]


def scorer_of(lm: LoadedModel, scoring: Scoring) -> TargetScorer:
    """The scorer given, or the model's under these compute settings (``scorer_for``)."""
    return scoring if isinstance(scoring, TargetScorer) else scorer_for(lm, scoring)


def texts_of(
    artifact: KeyTokenArtifact, lm: LoadedModel, settings: ScoreSettings, *, documents: Documents = None
) -> Texts:
    """The chosen documents of ``artifact`` and ``lm``'s tokens of each distinct text, tokenized once."""
    docs = pick_documents(artifact, documents)
    plain = plain_texts([Text(d.doc_id, d.text) for d in docs], lm, settings)
    return replace(plain, artifact=artifact, docs=docs)


def plain_texts(texts: list[Text], lm: LoadedModel, settings: ScoreSettings) -> Texts:
    """Texts without an artifact (lm-eval's requests), each distinct text tokenized once (the first of
    its ids kept): what ``logprobs`` scores."""
    first: dict[str, Text] = {}
    for t in texts:
        first.setdefault(t.text, t)
    unique = list(first.values())
    return Texts(settings, None, [], unique, [whole_sequence(lm, t, settings.add_bos) for t in unique])


def logprobs(texts: Texts, lm: LoadedModel, scoring: Scoring, *, progress: bool = False) -> list[ModelTokens]:
    """The model's tokens of each text and their log-probs at ``settings.context_limit``, as `make
    score` computes them (the same loop, ``passes``), in the order of ``texts.texts``."""
    scorer, limits = scorer_of(lm, scoring), (texts.settings.context_limit,)
    return [one.tokens for one in passes(texts, lm, scorer, limits, progress=progress)]


def score_texts(
    texts: Texts, lm: LoadedModel, scoring: Scoring, limits: Sequence[Limit] | None = None, *, progress=False
) -> Scores:
    """The artifact's documents at each context limit (default: ``settings.context_limit`` alone),
    each limit checked as `make score` checks its ``context_limit``. The model is in eval mode
    throughout, then back in the mode it was in."""
    if texts.artifact is None:
        raise PipelineError("scoring needs the texts of a key-token artifact (texts_of), not plain texts")
    limits = (texts.settings.context_limit,) if limits is None else tuple(limits)
    scorer = scorer_of(lm, scoring)
    tally = Tally(texts, limits)
    for one in passes(texts, lm, scorer, limits, progress=progress):
        tally.add(one)
    records = [settings_record(at, scorer.compute, lm, scorer) for at in at_limits(texts.settings, limits)]
    results = [
        result(texts.artifact, tally.in_order(r), records[r], tally.seconds[r]) for r in range(len(limits))
    ]
    warn(results, lm, scorer)
    return tally.scores_of(results)


@dataclass
class Pass:
    """The log-probs of one text at one context limit (``passes``)."""

    text: int  # its index in ``Texts.texts``
    limit: int  # the limit's index
    tokens: ModelTokens
    sequence: ModelSequence  # as the pass took it
    fits: bool  # the sequence fits the limit: the full pass's log-probs
    seconds: float  # model time of this pass (a full pass counts once, at the limit it is first used)


def passes(
    texts: Texts, lm: LoadedModel, scorer: TargetScorer, limits: tuple[Limit, ...], *, progress: bool = False
) -> Iterator[Pass]:
    """The one loop over documents: for each distinct text and each limit, the model's log-probs.
    Every (text, limit) is checked before the first pass."""
    if len(limits) > 1 and texts.settings.allow_truncation:
        raise PipelineError("several context limits score whole documents: leave allow_truncation unset")
    settings = at_limits(texts.settings, limits)
    fitted = [
        [fitted_sequence(lm, text.doc_id, whole, at) for at in settings]
        for text, whole in zip(texts.texts, texts.sequences, strict=True)
    ]
    one = len(limits) == 1
    bar = tqdm(total=len(fitted) * len(limits), desc="documents" if one else "document x limit",
               unit="doc" if one else "pass", disable=not progress)  # fmt: skip
    with eval_mode(lm.model), bar:
        scorer.check_against_full_forward()
        for i, (text, sequences) in enumerate(zip(texts.texts, fitted, strict=True)):
            fits = [w is None or len(s.seq) <= w for w, s in zip(limits, sequences, strict=True)]
            full, full_seconds = None, 0.0
            if any(fits):  # the full pass first; its time is full context's (or the first limit it fits)
                started = time.time()
                full = sequence_logprobs(lm, scorer, sequences[fits.index(True)], None, text.doc_id)
                full_seconds = time.time() - started
            owner = limits.index(None) if None in limits else fits.index(True) if any(fits) else -1
            for r, (limit, sequence) in enumerate(zip(limits, sequences, strict=True)):
                started = time.time()
                tokens = full if fits[r] else sequence_logprobs(lm, scorer, sequence, limit, text.doc_id)
                seconds = (time.time() - started) + (full_seconds if r == owner else 0.0)
                yield Pass(i, r, tokens, sequence, fits[r], seconds)
                bar.update()


def at_limits(settings: ScoreSettings, limits: tuple[Limit, ...]) -> list[ScoreSettings]:
    """The score settings at each context limit."""
    return [replace(settings, context_limit=w) for w in limits]


@dataclass
class Tally:
    """What ``score_texts`` gathers pass by pass: per limit the documents' sums, the model time and the
    documents its full pass served; per document the key tokens each limit cuts off from some of the
    context before them."""

    texts: Texts
    limits: tuple[Limit, ...]
    scores: list[dict[int, DocumentScore]] = field(init=False)  # per limit, by document row
    limited: np.ndarray = field(init=False)
    seconds: list[float] = field(init=False)
    copied: list[int] = field(init=False)
    holders: list[list[int]] = field(init=False)  # per distinct text, the rows of the documents with it
    aligned: dict[int, TokenAlignment] = field(init=False, default_factory=dict)  # by document row

    def __post_init__(self) -> None:
        m = len(self.limits)
        self.scores = [{} for _ in range(m)]
        self.limited = np.zeros((len(self.texts.docs), m), dtype=np.int64)
        self.seconds, self.copied = [0.0] * m, [0] * m
        index = {t.text: i for i, t in enumerate(self.texts.texts)}
        self.holders = [[] for _ in self.texts.texts]
        for row, doc in enumerate(self.texts.docs):
            self.holders[index[doc.text]].append(row)

    def add(self, one: Pass) -> None:
        """One pass: the sums of every document with its text (each document's key spans carried
        onto the tokens once, for every limit)."""
        self.seconds[one.limit] += one.seconds
        limit = self.limits[one.limit]
        for row in self.holders[one.text]:
            doc = self.texts.docs[row]
            if row not in self.aligned:
                self.aligned[row] = align_tokens(doc, one.tokens, self.texts.settings)
            aligned = self.aligned[row]
            self.scores[one.limit][row] = document_score(doc.doc_id, one.tokens, aligned)
            if not one.fits:
                cut = key_positions(aligned, one.sequence.n_prefix) >= limit
                self.limited[row, one.limit] = int(cut.sum())
            self.copied[one.limit] += int(one.fits and limit is not None)

    def in_order(self, r: int) -> list[DocumentScore]:
        """The document sums at limit ``r``, in the artifact's order."""
        return [self.scores[r][row] for row in range(len(self.texts.docs))]

    def scores_of(self, results: list[ScoreResult]) -> Scores:
        """The results with the ladder's per-document statistics."""
        m = len(self.limits)
        by_limit = [self.in_order(r) for r in range(m)]
        key_nll = np.array([[s.key.nll for s in scores] for scores in by_limit]).T.reshape(-1, m)
        key_n = np.array([s.key.n for s in by_limit[-1]])
        return Scores(self.limits, results, key_nll, key_n, self.limited, self.seconds, self.copied)


def key_positions(aligned: TokenAlignment, n_prefix: int) -> np.ndarray:
    """The positions in the sequence of the key tokens (each predicted from the tokens before it)."""
    return np.flatnonzero(aligned.scored)[aligned.key] + n_prefix


def warn(results: list[ScoreResult], lm: LoadedModel, scorer: TargetScorer) -> None:
    """Adds to each result what looks wrong with its numbers."""
    for r in results:
        if warning := worse_than_uniform(r.ppl, scorer.vocab_size, lm.source.spec):
            r.warnings.append(warning)


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
    settings: ScoreSettings, compute: Compute | None, lm: LoadedModel, scorer: TargetScorer
) -> dict[str, Any]:
    """What a result records of how it was computed: the score settings, the head blocks and window
    batches, the resolved dtypes, a compiled body (``compilation.record``) and where the model ran (on
    a GPU: which, ``gpu_record``)."""
    names = ("head_chunk", "vocab_tile", "window_batch_tokens")  # a scorer made without scorer_for: its own
    blocks = compute.record() if compute is not None else {name: getattr(scorer, name) for name in names}
    return {
        **settings.record(),
        **blocks,
        "dtype": dtype_name(lm.dtype),
        "head_dtype": dtype_name(scorer.head_dtype),
        "device": lm.placement,
        **compilation.record(lm.model),
        **gpu_record(lm.model),
    }


def unavailable_metrics(artifact: KeyTokenArtifact, *, grid: bool = True) -> dict[str, str]:
    """Why a metric (and, with ``grid``, the alpha/beta grid) is null for this artifact, by name; empty
    when every metric is computed."""
    if artifact.has_token_values:
        return {}
    reasons = {
        m.name: f"{m.label} {NEEDS_TOKEN_VALUES}"
        for m in metric_registry.metrics()
        if m.subset in metric_registry.NEEDS_TOKEN_VALUES
    }
    return reasons | ({"grid": f"the alpha/beta grid {NEEDS_TOKEN_VALUES}"} if grid else {})
