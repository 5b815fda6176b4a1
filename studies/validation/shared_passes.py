"""Several key-token artifacts of the same texts scored with one pass of the model per text.

`make validate` scores each member of its family against every evaluator's artifact on the same
GovReport documents. The score engine's loop (``pipeline.score.engine.passes``) runs once over the
distinct texts of all the artifacts; each pass's log-probs serve every artifact's document with that
text (its key spans carried onto the tokens, every metric's sums), so a second evaluator costs no model
time. Each artifact's result is the one ``pipeline.score.engine.score`` gives for it, to every digit.
"""

from __future__ import annotations

from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.models.loading import LoadedModel
from pipeline.score.documents import align_tokens, document_score
from pipeline.score.engine import (
    Documents,
    ScoreResult,
    Scoring,
    Text,
    passes,
    pick_documents,
    plain_texts,
    result,
    scorer_of,
    settings_record,
    warn,
)
from pipeline.score.sums import DocumentScore
from pipeline.settings import ScoreSettings


def score_artifacts(
    artifacts: list[KeyTokenArtifact],
    lm: LoadedModel,
    settings: ScoreSettings,
    scoring: Scoring,
    *,
    documents: Documents = None,
) -> list[ScoreResult]:
    """Per artifact (the same choice of documents in each), ``score``'s result of ``lm`` at
    ``settings.context_limit``, each distinct text through the model once; each result's ``seconds``
    are the model time of all the passes."""
    docs = [pick_documents(a, documents) for a in artifacts]
    texts = plain_texts([Text(d.doc_id, d.text) for chosen in docs for d in chosen], lm, settings)
    index = {t.text: i for i, t in enumerate(texts.texts)}
    holders: list[list[tuple[int, int]]] = [[] for _ in texts.texts]  # per text: (artifact, row)
    for a, chosen in enumerate(docs):
        for row, doc in enumerate(chosen):
            holders[index[doc.text]].append((a, row))
    scorer = scorer_of(lm, scoring)
    sums: list[dict[int, DocumentScore]] = [{} for _ in artifacts]
    seconds = 0.0
    for one in passes(texts, lm, scorer, (settings.context_limit,)):
        seconds += one.seconds
        for a, row in holders[one.text]:
            doc = docs[a][row]
            sums[a][row] = document_score(doc.doc_id, one.tokens, align_tokens(doc, one.tokens, settings))
    record = settings_record(settings, scorer.compute, lm, scorer)
    results = [
        result(artifact, [sums[a][row] for row in range(len(docs[a]))], record, seconds)
        for a, artifact in enumerate(artifacts)
    ]
    warn(results, lm, scorer)
    return results
