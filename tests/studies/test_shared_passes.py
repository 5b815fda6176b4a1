"""`make validate`'s scoring against several artifacts of the same texts
(``studies.validation.shared_passes``): each distinct text through the model once, each artifact's
result the score engine's to every digit."""

from __future__ import annotations

from pipeline.artifact.reader import open_artifact
from pipeline.models.loading import load_model
from pipeline.score import engine
from pipeline.settings import Compute, ScoreSettings
from studies.validation.shared_passes import score_artifacts


def test_one_pass_per_text_and_each_artifact_scored_as_the_engine_scores_it(
    other_model_dir, tiny_artifact, spans_artifact, monkeypatch
):
    lm = load_model(str(other_model_dir), dtype="float64", device="cpu")
    artifacts = [open_artifact(str(tiny_artifact)), open_artifact(str(spans_artifact))]
    compute, settings = Compute(head_chunk=16), ScoreSettings(context_limit=32)
    passes = []
    real = engine.sequence_logprobs

    def counted(lm, scorer, sequence, limit, doc_id):
        passes.append(doc_id)
        return real(lm, scorer, sequence, limit, doc_id)

    monkeypatch.setattr(engine, "sequence_logprobs", counted)
    results = score_artifacts(artifacts, lm, settings, compute, documents=2)
    assert passes == ["doc-0", "doc-1"]  # two artifacts, two texts: two passes
    assert (
        results[1].corpus["longppl_soft"] is None
        and "per-token LSD" in results[1].corpus["unavailable"]["grid"]
    )
    for artifact, got in zip(artifacts, results, strict=True):
        want = engine.score(artifact, lm, settings, compute, documents=2)
        assert (got.artifact, got.fingerprint) == (want.artifact, want.fingerprint)
        assert (got.corpus, got.documents, got.settings) == (want.corpus, want.documents, want.settings)
