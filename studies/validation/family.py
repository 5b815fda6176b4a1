"""The model family of `make validate`: several models, context limits and evaluators.

Members (``conf/validate.yaml``: ``members`` and ``checkpoints``) are models, each a ``conf/model/``
group or a local checkpoint, with a context limit: the score stage's ``context_limit``. Evaluators
(``evaluators``) are key-token artifacts on the same GovReport documents: an existing one, or one
built here by the keytokens stage with a ``conf/evaluator/`` group. Per member: the teacher-forced
answer-token accuracy on the synthetic documents (``study.retrieval``), and the score call on the
GovReport documents against every evaluator at once (``shared_passes.score_artifacts``: one pass of
the model per text), so a second evaluator costs no model time.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from pipeline import definition
from pipeline.artifact.reader import ArtifactDocument, iter_documents, open_artifact
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.files import write_bytes_atomic
from pipeline.jobs.keytokens import KeyTokensJob
from pipeline.jobs.recipe import run as run_job
from pipeline.models.loading import ModelChoice
from pipeline.models.logprobs import TargetScorer
from pipeline.settings import Compute, ScoreSettings
from studies.validation import study
from studies.validation.options import ValidateSettings
from studies.validation.shared_passes import score_artifacts
from studies.validation.synthetic import SyntheticDocument

# The built artifact takes the numbers' settings of the reference artifact (`govreport`) ...
REFERENCE_SETTINGS = (*definition.DEFINITION_FIELDS, "add_bos", "dtype")
# ... and how to compute from this run's config (window batches: the keytokens stage's own).
COMPUTE_SETTINGS = ("device", "head_chunk", "vocab_tile", "cache_dir", "progress")
# Per member and evaluator: the values that depend on the evaluator's key tokens.
EVALUATOR_VALUES = ("longppl", "longppl_soft", "key_bpb", "n_key_tokens", "n_key_bytes", "key_char_coverage")


@dataclass(frozen=True)
class Member:
    label: str
    choice: ModelChoice
    context_limit: int | None
    checkpoint: bool  # listed under `checkpoints` (a fine-tuned model)


@dataclass
class Evaluator:
    label: str
    spec: str  # the evaluator model's spec, from the artifact's manifest
    artifact: KeyTokenArtifact
    documents: list[ArtifactDocument]  # the family's GovReport documents, in the reference's order
    built: bool  # built by this run (not an existing artifact)


# ----------------------------------------------------------------------------------------------
# Members


def members(v: ValidateSettings) -> list[Member]:
    """``members`` then ``checkpoints``, each model's group composed from ``conf/score.yaml``."""
    items = [(item, False) for item in v.options.members] + [(item, True) for item in v.options.checkpoints]
    out = [member(item, checkpoint, v.model_for) for item, checkpoint in items]
    require_unique_labels([m.label for m in out], "family members")
    return out


def require_unique_labels(labels: list[str], what: str) -> None:
    """Labels name rows and plot points: two alike is an error naming them."""
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise PipelineError(f"{what} share the label(s) {', '.join(twice)}: give each a `label`")


MEMBER_KEYS = ("model", "spec", "context_limit", "label")


def member(item: dict[str, Any], checkpoint: bool, model_for: Any) -> Member:
    unknown = sorted(set(item) - set(MEMBER_KEYS))
    if unknown:
        raise PipelineError(
            f"family member {dict(item)}: no setting {unknown[0]} (known: {', '.join(MEMBER_KEYS)})"
        )
    model, spec = item.get("model"), item.get("spec")
    if (model is None) == (spec is None):
        raise PipelineError(f"family member {dict(item)}: give exactly one of `model` (a conf/model/ group) "
                            "or `spec` (a local checkpoint directory or .gguf file)")  # fmt: skip
    if spec is not None and not Path(str(spec)).expanduser().exists():
        raise PipelineError(f"family member {dict(item)}: no checkpoint at {spec}")
    overrides = (
        [f"model={model}"] if model is not None else ["model=local", f"model.spec={json.dumps(str(spec))}"]
    )
    choice = model_for(overrides)
    limit = item.get("context_limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 2):
        raise PipelineError(f"family member {dict(item)}: context_limit is a number of tokens (at least 2)")
    return Member(item.get("label") or default_label(choice, limit), choice, limit, checkpoint)


def default_label(choice: ModelChoice, limit: int | None) -> str:
    """``<name> W=<limit>`` or ``<name> full``; a checkpoint directory's name with its parent's."""
    path = Path(choice.spec)
    name = choice.name or (f"{path.parent.name}/{path.name}" if path.exists() else choice.spec)
    return f"{name} {'full' if limit is None else f'W={limit}'}"


def is_self_evaluation(m: Member, evaluator: Any) -> bool:
    """The member's model is the evaluator's model (same spec; ``evaluator``: an ``Evaluator``, or
    anything with its ``spec``, such as the LooGLE target)."""
    return m.choice.spec == evaluator.spec


# ----------------------------------------------------------------------------------------------
# Evaluators


def evaluators(v: ValidateSettings, work: Path) -> list[Evaluator]:
    """The key-token artifacts of ``evaluators``, each on the first ``govreport_documents``
    documents of ``govreport`` (their texts checked equal)."""
    reference = open_artifact(Path(v.options.govreport))
    documents = list(iter_documents(reference))[: v.options.govreport_documents]
    out = []
    for item in v.options.evaluators:
        built = item.get("artifact") is None
        if built and item.get("evaluator") is None:
            raise PipelineError(
                f"evaluator {dict(item)}: give `artifact` (a directory) or `evaluator` (a group)"
            )
        path = build_artifact(v, item, reference, documents, work) if built else Path(str(item["artifact"]))
        artifact = open_artifact(path)
        spec = artifact.settings["evaluator"]["spec"]
        docs = matching_documents(artifact, documents)
        out.append(Evaluator(item.get("label") or spec, spec, artifact, docs, built))
    require_unique_labels([e.label for e in out], "evaluators")
    return out


def matching_documents(
    artifact: KeyTokenArtifact, documents: list[ArtifactDocument]
) -> list[ArtifactDocument]:
    """The artifact's documents with the ids of ``documents``, each with the same text, or an error."""
    by_id = {d.doc_id: d for d in iter_documents(artifact)}
    for d in documents:
        if d.doc_id not in by_id or by_id[d.doc_id].text != d.text:
            problem = "lacks" if d.doc_id not in by_id else "has another text for"
            raise PipelineError(f"evaluator artifact {artifact.root} {problem} document '{d.doc_id}': "
                                "every evaluator must cover the same texts")  # fmt: skip
    return [by_id[d.doc_id] for d in documents]


def build_artifact(
    v: ValidateSettings,
    item: dict[str, Any],
    reference: KeyTokenArtifact,
    documents: list[ArtifactDocument],
    work: Path,
) -> Path:
    """The keytokens stage with the evaluator group ``item.evaluator`` (and ``item.spec``, if given:
    ``{evaluator: local, spec: <dir>}``) on the exact texts of ``documents`` (no truncation: the same
    characters as the reference), its config composed from ``conf/keytokens.yaml`` with the
    reference's settings; its directory (rebuilt when ``fresh``)."""
    name = f"{reference.settings['corpus']['name']}-first{len(documents)}"
    corpus = work / f"{name}.jsonl"
    write_bytes_atomic(
        corpus, "".join(json.dumps({"id": d.doc_id, "text": d.text}) + "\n" for d in documents).encode()
    )
    overrides = [f"evaluator={item['evaluator']}", "corpus=local", f"corpus.name={json.dumps(name)}"]
    overrides += [f"evaluator.spec={json.dumps(str(item['spec']))}"] if item.get("spec") is not None else []
    overrides += [
        f"corpus.path={json.dumps(str(corpus))}",
        f"output_dir={json.dumps(str(work / 'keytokens'))}",
    ]
    overrides += ["max_tokens=null", "min_tokens=0", "num_documents=null", "name=null"]
    overrides += [f"{k}={json.dumps(reference.settings[k])}" for k in REFERENCE_SETTINGS]
    overrides += v.overrides(COMPUTE_SETTINGS)
    return build_keytokens(v.keytokens_for(overrides), v.options.fresh)


def build_keytokens(settings: KeyTokensJob, fresh: bool) -> Path:
    """The keytokens stage's artifact for ``settings`` (computed again when ``fresh``); its directory."""
    root = settings.artifact_dir()
    if fresh and root.exists():
        shutil.rmtree(root)
    run_job(settings)
    return root


# ----------------------------------------------------------------------------------------------
# Scoring


def score_family(
    v: ValidateSettings,
    family: list[Member],
    docs: list[SyntheticDocument],
    evals: list[Evaluator],
    load: Any,
    timing: dict[str, float],
    loogle_part: Callable[[Member, Any, TargetScorer], dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One row per member, each model loaded once (``load(choice) -> (lm, scorer)``); the seconds of
    each member, and of its GovReport part, go to ``timing``. ``loogle_part(member, lm, scorer)``: each
    row's ``loogle`` part (the second target), its seconds timed as ``member <label> LooGLE``."""
    rows: dict[str, dict[str, Any]] = {}
    choices = list(dict.fromkeys(m.choice for m in family))
    bar = tqdm(total=len(family), desc="model family", unit="member", disable=not v.progress)
    for choice in choices:
        lm, scorer = load(choice)
        for m in (m for m in family if m.choice == choice):
            started = time.time()
            rows[m.label] = member_row(v.compute, m, lm, scorer, docs, evals)
            timing[f"member {m.label} GovReport"] = rows[m.label].pop("govreport_seconds")
            if loogle_part is not None:
                part = time.time()
                rows[m.label]["loogle"] = loogle_part(m, lm, scorer)
                timing[f"member {m.label} LooGLE"] = time.time() - part
            timing[f"member {m.label}"] = time.time() - started
            bar.update()
        del lm, scorer
    bar.close()
    return [rows[m.label] for m in family]


def member_row(
    compute: Compute,
    m: Member,
    lm: Any,
    scorer: TargetScorer,
    docs: list[SyntheticDocument],
    evals: list[Evaluator],
) -> dict[str, Any]:
    """Retrieval on the synthetic documents; PPL and bits per byte on GovReport; and per evaluator
    LongPPL, LongPPL-soft, key bits per byte, and whether it is self-evaluation."""
    settings = ScoreSettings(context_limit=m.context_limit)
    ids = [d.doc_id for d in evals[0].documents]
    started = time.time()
    scored = score_artifacts([ev.artifact for ev in evals], lm, settings, compute, documents=ids)
    corpora = [r.corpus for r in scored]
    seconds = time.time() - started
    row = {
        "label": m.label,
        "model": m.choice.spec,
        "context_limit": m.context_limit,
        "checkpoint": m.checkpoint,
    }
    row.update(study.retrieval(lm, scorer, docs, m.context_limit))
    row.update({k: corpora[0][k] for k in ("ppl", "bpb", "n_tokens", "n_bytes", "n_truncated")})
    row["evaluators"] = {
        ev.label: {"self_evaluation": is_self_evaluation(m, ev), **{k: c[k] for k in EVALUATOR_VALUES}}
        for ev, c in zip(evals, corpora, strict=True)
    }
    return row | {"govreport_seconds": seconds}


def evaluator_record(ev: Evaluator) -> dict[str, Any]:
    """What results.json records of an evaluator."""
    s = ev.artifact.settings
    return {
        "label": ev.label,
        "evaluator": ev.spec,
        "artifact": ev.artifact.root.name,
        "fingerprint": ev.artifact.manifest["fingerprint"],
        "built": ev.built,
        **{k: s[k] for k in ("K", "d", "alpha", "beta", "gamma")},
        "evaluator_tokens": sum(len(d.lsd) for d in ev.documents),
        "key_tokens": sum(
            int(definition.is_key(d.lsd, d.long, s["alpha"], s["beta"]).sum()) for d in ev.documents
        ),
    }
