"""The score call: PPL, LongPPL, LongPPL-soft and bits per byte of a loaded model against a
key-token artifact, per document and over the corpus.

``score`` is what `make score`, the Python API (``pipeline.api.score``), the training callback,
`make validate` and `make longce-demo` run; ``score_against`` scores one model pass of each text
against several artifacts of the same texts (several evaluators' key tokens).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from pipeline.artifact.reader import ArtifactDocument, iter_documents
from pipeline.artifact.schema import NEEDS_TOKEN_VALUES, KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.models.loading import LoadedModel, dtype_name, eval_mode
from pipeline.models.logprobs import TargetScorer, scorer_for
from pipeline.models.pairing import worse_than_uniform
from pipeline.models.placement import gpu_record
from pipeline.results.keys import documents_record
from pipeline.score.documents import ModelTokens, model_logprobs, score_tokens
from pipeline.score.sums import corpus_summary
from pipeline.settings import Compute, ScoreSettings

Documents = int | Sequence[str] | None  # all, the first N, or these ids


@dataclass
class ScoreResult:
    """A model's scores on an artifact: corpus values and per-document values, as in the results
    file (``pipeline.results.scores``); ``corpus["unavailable"]`` says why a null metric is null."""

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
    for r in results:
        if warning := worse_than_uniform(r.ppl, scorer.vocab_size, lm.source.spec):
            r.warnings.append(warning)
    return results


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
