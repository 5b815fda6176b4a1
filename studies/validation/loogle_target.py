"""`make validate`'s second target: LooGLE's long-dependency questions (``conf/validate.yaml``: ``loogle``).

The LooGLE documents' own key tokens: an artifact built here by the keytokens stage with the study's
evaluator settings from ``loogle.data`` (``auto``: LooGLE's published test data in
``../shared/data/loogle`` when it is there, else the embedded sample; ``sample``; or a folder), or
given; its questions, answers and located evidence travel with it. Per family member, at its context
limit (the model's context when it has none): PPL, LongPPL and LongPPL-soft of the member on those
documents (the score stage, against that artifact; a document longer than a whole-context member's
context is scored on the prefix that fits, counted as truncated), and the answer gain of each question
(``pipeline.loogle.evidence.answer_gain``, ``loogle.count``). Then the statistics of
``studies.validation.loogle_stats``: the members with at least ``loogle.min_questions`` counted
questions, each metric against the mean answer gain within each model, across the members that are not
the evaluator, and the evaluator's apart, with p-values of a paired bootstrap over documents.
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
from pipeline.score.engine import score
from pipeline.settings import Compute, ScoreSettings
from studies.validation import family, loogle_stats
from studies.validation.options import LoogleTargetOptions, ValidateSettings

# LooGLE's published test data beside the clone (its README: ../shared/data/loogle).
TEST_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "loogle"
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


def data_of(o: LoogleTargetOptions) -> str:
    """``sample`` or a folder of LooGLE's data: ``auto`` is the test data where it is, else the sample."""
    if o.data != "auto":
        return o.data
    return str(TEST_DATA) if (TEST_DATA / "longdep_qa.jsonl").is_file() else "sample"


def data_label(o: LoogleTargetOptions) -> str:
    """What the report calls ``o.data``'s documents."""
    data = data_of(o)
    return "sample" if data == "sample" else "LooGLE's test data" if Path(data) == TEST_DATA else "a folder"


def corpus_overrides(o: LoogleTargetOptions) -> list[str]:
    """The keytokens corpus of ``o.data``: ``loogle_sample``, or ``loogle`` read from a folder."""
    data = data_of(o)
    if data == "sample":
        return ["corpus=loogle_sample"]
    name = "loogle_testdata" if Path(data) == TEST_DATA else "loogle_folder"
    return ["corpus=loogle", f"corpus.loogle={json.dumps(data)}", f"corpus.name={name}",
            "corpus.dataset=null", "corpus.revision=null"]  # fmt: skip


def build(v: ValidateSettings, o: LoogleTargetOptions, work: Path) -> Path:
    """The keytokens stage on ``o.data``'s documents with the evaluator group ``o.evaluator`` and the
    preset ``o.preset`` (its K and d), cut to ``o.max_tokens``, computed with the study's compute settings."""
    overrides = [*corpus_overrides(o), f"output_dir={json.dumps(str(work / 'keytokens'))}", "name=null"]
    overrides += [f"max_tokens={json.dumps(o.max_tokens)}", "num_documents=null"]
    overrides += [f"corpus.tasks={json.dumps(list(o.tasks))}"]  # only the documents of the target's tasks
    overrides += [f"evaluator={o.evaluator}", f"preset={o.preset}"]
    overrides += v.overrides(STAGE1_KEYS)
    return family.build_keytokens(v.keytokens_for(overrides), v.options.fresh)


def member_part(
    compute: Compute, m: family.Member, lm: Any, scorer: TargetScorer, t: LoogleTarget, count: str = "all"
) -> dict[str, Any]:
    """One member on the LooGLE documents: its scores against their key tokens and its answer gains."""
    # A document longer than a whole-context member's context: the prefix that fits (flagged, counted).
    settings = ScoreSettings(context_limit=m.context_limit, allow_truncation=m.context_limit is None)
    corpus = score(t.artifact, lm, settings, compute).corpus
    limit = m.context_limit or lm.context_length
    if limit is None:
        raise PipelineError(f"{m.label}: the model's config gives no context length: give it a context_limit")
    gains = answer_gain.answer_gains(lm.tokenizer, scorer, t.questions, t.texts, [limit], count)
    return {
        **{k: corpus[k] for k in SCORE_VALUES},
        "self_evaluation": family.is_self_evaluation(m, t),
        "limit": limit,
        **answer_gain.aggregate(gains),
        "by_type": answer_gain.summary(gains),
        "questions": [g.to_dict() for g in gains],
    }


def correlations(rows: list[dict[str, Any]], o: LoogleTargetOptions) -> dict[str, Any]:
    """The statistics of the members' answer gains (``loogle_stats.statistics``), and how large a
    correlation the members that count across models could show (``critical_r``)."""
    stats = loogle_stats.statistics(rows, o.min_questions, o.resamples, o.seed)
    stats["critical_r"] = critical_r(len(stats["across"]["own"]["labels"]))
    return stats


def critical_r(n: int, level: float = 0.05) -> float | None:
    """The smallest |r| with a two-sided p below ``level`` for n pairs (the t distribution of Pearson's
    test, which scipy's Spearman p-value also uses)."""
    from scipy import stats

    if n < 3:
        return None
    t = float(stats.t.ppf(1 - level / 2, n - 2))
    return t / math.sqrt(n - 2 + t * t)


def record(t: LoogleTarget, o: LoogleTargetOptions) -> dict[str, Any]:
    """What results.json records of the target's artifact and questions."""
    s = t.artifact.settings
    return {
        "artifact": t.artifact.root.name,
        "fingerprint": t.artifact.manifest["fingerprint"],
        "built": t.built,
        "data": "given artifact"
        if not t.built
        else "sample"
        if data_of(o) == "sample"
        else "LooGLE's test data"
        if Path(data_of(o)) == TEST_DATA
        else "folder",
        "count": o.count,
        "evaluator": t.spec,
        **{k: s[k] for k in ("K", "d", "alpha", "beta", "gamma")},
        "tasks": list(o.tasks),
        "documents": [{"doc_id": d, "n_chars": len(text)} for d, text in t.texts.items()],
        "questions": len(t.questions),
        "types": sorted({q.type or "untyped" for q in t.questions}),
    }
