"""A task's predictions scored as LooGLE's ``automatic_eval.py`` scores them: the similarity metrics
(``automatic_sim``) averaged over questions, the cloze matches (``automatic_match``) pooled over masks
(LooGLE prints that ratio rounded to 4 digits; here it is kept whole). BERTScore needs its scorer model:
where it cannot be had it is null with its reason, and the other metrics still come out."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.errors import PipelineError
from pipeline.hub import hub_offline
from pipeline.loogle.generation.predictions import Scored
from pipeline.loogle.metrics import similarity as metrics

SIMILARITY = ("bleu1", "bleu4", "rouge1", "rouge2", "rougeL", "meteor", "bertscore")
MATCH = ("exact_match", "partial_match")
SCORER_REPOS = ("FacebookAI/roberta-large", "roberta-large")  # where the Hub cache may hold it


def scorer_cached() -> bool:
    from huggingface_hub import try_to_load_from_cache

    return any(isinstance(try_to_load_from_cache(repo, "config.json"), str) for repo in SCORER_REPOS)


def bertscore_mode(value: Any) -> str:
    """The ``bertscore`` setting as auto, true or false (YAML reads true and false as booleans)."""
    mode = str(value).lower()
    if mode not in ("auto", "true", "false"):
        raise PipelineError(f"setting bertscore={value}: one of auto, true, false")
    return mode


def bert_scorer(bertscore: str) -> tuple[Any | None, str | None]:
    """bert-score's scorer for lang="en", or None and why not. ``bertscore``: auto (when its model is in
    the local Hub cache), true (load it, downloading if need be; failing is an error) or false."""
    if bertscore == "false":
        return None, "not asked for (bertscore=false)"
    try:
        from bert_score import BERTScorer
    except ImportError:
        return None, "bert-score is not installed: run `make setup-loogle`"
    if bertscore == "auto" and not scorer_cached():
        return None, (
            f"its model {metrics.BERTSCORE_MODEL} is not in the local Hub cache: on a connected machine pass "
            "bertscore=true (downloads it, 1.4 GB), or run `hf download FacebookAI/roberta-large`"
        )
    try:
        return BERTScorer(lang="en"), None
    except Exception as exc:  # transformers raises several types for a model it cannot load
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        if bertscore == "true" and not hub_offline():
            raise PipelineError(
                f"could not load BERTScore's model {metrics.BERTSCORE_MODEL}: {detail}"
            ) from exc
        return None, f"could not load its model {metrics.BERTSCORE_MODEL}: {detail}"


def score_task(task: str, pairs: list[Scored], bertscore: str = "auto") -> dict[str, Any]:
    """The task's metrics over ``pairs``: ``metrics`` (name -> value or None), ``unavailable`` (name ->
    reason), ``n_questions``."""
    if not pairs:
        raise PipelineError("no predictions to score")
    if task == "shortdep_cloze":
        return {"n_questions": len(pairs), "metrics": match_scores(pairs), "unavailable": {}}
    for number, pair in enumerate(pairs):
        if not isinstance(pair.prediction, str) or not isinstance(pair.answer, str):
            raise PipelineError(f"prediction {number}: expected text and a text answer for task {task}")
    unavailable = {"meteor": metrics.wordnet_problem()}
    per_question = [metrics.similarity(p.answer, p.prediction, not unavailable["meteor"]) for p in pairs]
    values: dict[str, float | None] = {
        name: None if unavailable.get(name) else float(np.mean([q[name] for q in per_question]))
        for name in SIMILARITY[:-1]
    }
    scorer, unavailable["bertscore"] = bert_scorer(bertscore_mode(bertscore))
    values["bertscore"] = (
        None
        if scorer is None
        else float(
            np.mean(metrics.bertscores([p.answer for p in pairs], [p.prediction for p in pairs], scorer))
        )
    )
    reasons = {name: reason for name, reason in unavailable.items() if reason}
    return {"n_questions": len(pairs), "metrics": values, "unavailable": reasons}


def match_scores(pairs: list[Scored]) -> dict[str, float]:
    """Exact and partial match: matched masks over all masks."""
    out = {}
    for name, function in (("exact_match", metrics.exact_match), ("partial_match", metrics.partial_match)):
        counts = [function(p.answer, p.prediction) for p in pairs]
        out[name] = float(np.sum([c[0] for c in counts]) / np.sum([c[1] for c in counts]))
    return out
