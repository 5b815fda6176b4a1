"""`make validate`'s second target: LooGLE's long-dependency questions (``conf/validate.yaml``: ``loogle``).

The LooGLE documents' own key tokens: an artifact of ``corpus=loogle_sample`` (or ``corpus=loogle``),
given or built here by the keytokens stage with the study's evaluator settings; its questions, answers
and located evidence travel with it. Per family member, at its context limit (the model's context when
it has none): PPL, LongPPL and LongPPL-soft of the member on those documents (the score stage, against
that artifact; a document longer than a whole-context member's context is scored on the prefix that
fits, counted as truncated), and the answer gain of each question (``pipeline.loogle.evidence.answer_gain``).
Then, over the members with counted questions, the Pearson and Spearman correlation of each metric
with the mean answer gain in bits per byte, with p-values, and how large a correlation that many
members could show.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.artifact.qa import ArtifactQuestion
from pipeline.artifact.reader import open_artifact
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.loogle.evidence import answer_gain
from pipeline.models.logprobs import TargetScorer
from pipeline.results.correlations import correlate
from pipeline.score.engine import score
from pipeline.settings import Compute, ScoreSettings
from studies.validation import family, study
from studies.validation.options import LoogleTargetOptions, ValidateSettings

# The metrics correlated with the answer gain (all against the LooGLE artifact's key tokens).
METRICS = {"ppl": "PPL", "longppl": "LongPPL", "longppl_soft": "LongPPL-soft"}
SCORE_VALUES = ("ppl", "longppl", "longppl_soft", "n_tokens", "n_key_tokens", "n_truncated")
# What the build takes from the study's settings (the built evaluators' compute settings, and its dtype).
STAGE1_KEYS = ("dtype", *family.COMPUTE_SETTINGS)


@dataclass
class LoogleTarget:
    artifact: KeyTokenArtifact
    questions: list[ArtifactQuestion]  # those of the chosen tasks
    texts: dict[str, str]  # the artifact's text of each document
    built: bool

    @property
    def spec(self) -> str:
        """The evaluator's spec, from the artifact's settings."""
        return self.artifact.settings["evaluator"]["spec"]


def target(v: ValidateSettings, work: Path) -> LoogleTarget | None:
    """The artifact and its questions of the chosen tasks (None: ``loogle.enabled`` is false)."""
    o = v.options.loogle
    if not o.enabled:
        return None
    built = o.artifact is None
    path = build(v, o, work) if built else Path(o.artifact)
    artifact = open_artifact(path)
    questions, texts = answer_gain.questions_of(artifact, o.tasks)
    return LoogleTarget(artifact, questions, texts, built)


def build(v: ValidateSettings, o: LoogleTargetOptions, work: Path) -> Path:
    """The keytokens stage on ``o.corpus`` with the evaluator group ``o.evaluator`` and the preset
    ``o.preset`` (its K and d), cut to ``o.max_tokens``, computed with the study's compute settings."""
    overrides = [f"corpus={o.corpus}", f"output_dir={json.dumps(str(work / 'keytokens'))}", "name=null"]
    overrides += [f"max_tokens={json.dumps(o.max_tokens)}", "num_documents=null"]
    overrides += [f"corpus.tasks={json.dumps(list(o.tasks))}"]  # only the documents of the target's tasks
    overrides += [f"evaluator={o.evaluator}", f"preset={o.preset}"]
    overrides += v.overrides(STAGE1_KEYS)
    return family.build_keytokens(v.keytokens_for(overrides), v.options.fresh)


def member_part(
    compute: Compute, m: family.Member, lm: Any, scorer: TargetScorer, t: LoogleTarget
) -> dict[str, Any]:
    """One member on the LooGLE documents: its scores against their key tokens and its answer gains."""
    # A document longer than a whole-context member's context: the prefix that fits (flagged, counted).
    settings = ScoreSettings(context_limit=m.context_limit, allow_truncation=m.context_limit is None)
    corpus = score(t.artifact, lm, settings, compute).corpus
    limit = m.context_limit or lm.context_length
    if limit is None:
        raise PipelineError(f"{m.label}: the model's config gives no context length: give it a context_limit")
    gains = answer_gain.answer_gains(lm.tokenizer, scorer, t.questions, t.texts, [limit])
    return {
        **{k: corpus[k] for k in SCORE_VALUES},
        "self_evaluation": family.is_self_evaluation(m, t),
        "limit": limit,
        **answer_gain.aggregate(gains),
        "by_type": answer_gain.summary(gains),
        "questions": [g.to_dict() for g in gains],
    }


def correlations(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each metric against the mean answer gain (bits per byte) over the members with counted
    questions; the smallest |r| that many members make significant at 5% (two-sided t test); and the
    same against the mean over only the questions every one of those members counts (``common``), so
    that no member's mean rests on questions another's lacks."""
    usable = [r for r in rows if r["loogle"]["gain_bits_per_byte"] is not None]
    common = common_questions(usable)
    common_gains = [mean_gain(r, common) for r in usable] if common else []
    return {
        "members": len(usable),
        "members_without_questions": [r["label"] for r in rows if r not in usable],
        "questions": [r["loogle"]["n_counted"] for r in usable],
        "critical_r": critical_r(len(usable)),
        **against(usable, [r["loogle"]["gain_bits_per_byte"] for r in usable]),
        "common": {"questions": common, **against(usable if common else [], common_gains)},
    }


def against(members: list[dict[str, Any]], gains: list[float]) -> dict[str, Any]:
    """Each metric of ``members`` correlated with ``gains``, and the ranking."""
    out = []
    for metric, label in METRICS.items():
        stats, note = correlate([r["loogle"][metric] for r in members], gains)
        out.append({"metric": metric, "label": label, "n": len(members), **stats, "note": note})
    return {"rows": out, "ranking": ranking(out)}


def common_questions(members: list[dict[str, Any]]) -> list[str]:
    """The questions (source ids, in order) that every member counts."""
    counted = [[q["source_id"] for q in r["loogle"]["questions"] if q["excluded"] is None] for r in members]
    return [q for q in counted[0] if all(q in c for c in counted[1:])] if counted else []


def mean_gain(row: dict[str, Any], questions: list[str]) -> float:
    """A member's mean answer gain in bits per byte over ``questions``."""
    values = [q["gain_bits_per_byte"] for q in row["loogle"]["questions"] if q["source_id"] in questions]
    return sum(values) / len(values)


def critical_r(n: int, level: float = 0.05) -> float | None:
    """The smallest |r| with a two-sided p below ``level`` for n pairs (the t distribution of Pearson's
    test, which scipy's Spearman p-value also uses)."""
    from scipy import stats

    if n < 3:
        return None
    t = float(stats.t.ppf(1 - level / 2, n - 2))
    return t / math.sqrt(n - 2 + t * t)


def ranking(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Which metric ranks the family best against the answer gain: the most negative Spearman rho
    (lower perplexity, larger gain); and LongPPL against PPL, whatever the answer."""
    rho = {r["metric"]: r["spearman_r"] for r in rows}
    return {**study.best_by_spearman(rho), "longppl_vs_ppl": study.compare(rho["longppl"], rho["ppl"])}


def record(t: LoogleTarget, o: LoogleTargetOptions) -> dict[str, Any]:
    """What results.json records of the target's artifact and questions."""
    s = t.artifact.settings
    return {
        "artifact": t.artifact.root.name,
        "fingerprint": t.artifact.manifest["fingerprint"],
        "built": t.built,
        "evaluator": t.spec,
        **{k: s[k] for k in ("K", "d", "alpha", "beta", "gamma")},
        "tasks": list(o.tasks),
        "documents": [{"doc_id": d, "n_chars": len(text)} for d, text in t.texts.items()],
        "questions": len(t.questions),
        "types": sorted({q.type or "untyped" for q in t.questions}),
    }
