"""The `make validate` run: the paper's two claims, checked with the embedded models on CPU.

1. Key-token identification: the keytokens stage with the embedded evaluator on seeded LongEval-style
   documents (``studies.validation.synthetic``), then ``study.identification``.
2. LongPPL against long-context ability: a family of models (both embedded models at several context
   limits, and fine-tuned checkpoints when given) scored against two evaluators' key tokens on the
   same GovReport documents (``studies.validation.family``, ``study.correlations``).
3. A second ability target: LooGLE's long-dependency questions, the answer gain of each member, against
   its PPL, LongPPL and LongPPL-soft on LooGLE's documents (``studies.validation.loogle_target``).

Writes ``docs/reports/validation.md`` (``studies.validation.report``), ``docs/reports/validation/*.png``,
the key-token page of one synthetic document and ``docs/reports/validation/results.json`` (every number;
no timings, so that two runs compare equal).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.artifact.reader import load_artifact
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.definition import DEFINITION_FIELDS
from pipeline.errors import PipelineError
from pipeline.files import write_bytes_atomic, write_json_atomic
from pipeline.jobs.recipe import offline_unless
from pipeline.models.loading import LoadedModel, ModelChoice
from pipeline.models.logprobs import TargetScorer, scorer_for
from pipeline.models.sources import is_local_model
from pipeline.provenance import file_sha256
from pipeline.reporting.keytoken_page import write_page
from pipeline.settings import Compute, field_names
from studies.validation import family, figures, loogle_target, report, study, synthetic
from studies.validation.options import ValidateSettings

# The settings results.json records (the evaluator and model by their spec).
SETTINGS = ("seed", "documents", "lines", "questions", "min_gap_lines", "evaluator", "K", "d")
SETTINGS += ("alpha", "beta", "gamma", "govreport_documents")
STAGE1_KEYS = (*DEFINITION_FIELDS, *field_names(Compute), "progress")


def run(v: ValidateSettings) -> dict[str, Any]:
    """The whole study (or with ``loogle.only`` its LooGLE target alone), offline unless a member needs
    the Hub; returns the results written to ``<docs_dir>/results.json``."""
    members = family.members(v)  # the family and its evaluators first: a wrong one fails at once
    with offline_unless(*(not is_local_model(m.choice.spec) for m in members)):
        return loogle_only(v, members) if v.options.loogle.only else whole_study(v, members)


def whole_study(v: ValidateSettings, members: list[family.Member]) -> dict[str, Any]:
    """Every part of the study with the family ``members``."""
    started, timing, o = time.time(), {}, v.options
    work, out = Path(o.work_dir), Path(o.docs_dir)
    t = time.time()
    evals = family.evaluators(v, work)
    timing["evaluator artifacts"] = time.time() - t
    t = time.time()
    loogle = loogle_target.target(v, work)
    timing["LooGLE artifact"] = time.time() - t
    docs = synthetic.make_corpus(
        o.seed, o.documents, n_lines=o.lines, n_questions=o.questions, min_gap_lines=o.min_gap_lines
    )
    corpus = synthetic.write_corpus(docs, work / "longeval.jsonl")
    t = time.time()
    artifact = load_artifact(keytokens_on(v, corpus, work))
    timing["stage 1 on the synthetic corpus"] = time.time() - t
    tokens, part1 = identification_part(v, artifact, docs, out)
    t = time.time()
    part = (
        None
        if loogle is None
        else lambda m, lm, scorer: loogle_target.member_part(v.compute, m, lm, scorer, loogle, o.loogle.count)
    )
    rows = family.score_family(v, members, docs, evals, lambda choice: load(choice, v.compute), timing, part)
    timing["model family"] = time.time() - t
    t = time.time()
    evaluator = evaluator_retrieval(v, docs, members, rows)
    timing["evaluator retrieval"] = time.time() - t
    labels = [e.label for e in evals]
    stats = study.correlations(rows, labels)
    for metric, png in figures.family_pngs(rows, stats, labels).items():
        write_bytes_atomic(out / f"family-{metric}.png", png)
    results = {
        "settings": recorded_settings(v, members),
        "synthetic": {**part1, "corpus_sha256": file_sha256(corpus)},
        "identification": study.identification(tokens, v.grid),
        "evaluator_retrieval": evaluator,
        "govreport": {
            "artifact": Path(o.govreport).name,
            "documents": [d.doc_id for d in evals[0].documents],
        },
        "evaluators": [family.evaluator_record(e) for e in evals],
        "family": rows,
        "correlations": stats,
        "ranking": {label: study.ranking(stats[label]) for label in labels},
    }
    if loogle is not None:
        results["loogle"] = loogle_target.record(loogle, v.options.loogle)
        results["loogle"]["correlations"] = loogle_target.correlations(rows, v.options.loogle)
        write_bytes_atomic(
            out / "loogle-gain.png", figures.loogle_png(rows, results["loogle"]["correlations"])
        )
    return write_results(v, json.loads(json.dumps(results)), timing, started, docs[0].id)


def loogle_only(v: ValidateSettings, members: list[family.Member]) -> dict[str, Any]:
    """The LooGLE target recomputed alone (``loogle.only=true``): the previous run's results.json with
    its ``loogle`` parts replaced (the artifact, each member's part, the statistics), the report rendered
    again; the other sections' numbers stay that run's. The family must be the previous run's."""
    started, timing, o = time.time(), {"LooGLE only": 0.0}, v.options
    previous = Path(o.docs_dir) / "results.json"
    if not previous.is_file():
        raise PipelineError(
            f"loogle.only=true recomputes the LooGLE section of {previous}: run make validate first"
        )
    results = json.loads(previous.read_text())
    if [m.label for m in members] != [r["label"] for r in results["family"]]:
        raise PipelineError(f"loogle.only=true: the family differs from {previous}'s: run the whole study")
    t = time.time()
    loogle = loogle_target.target(v, Path(o.work_dir))
    timing["LooGLE artifact"] = time.time() - t
    if loogle is None:
        raise PipelineError("loogle.only=true with loogle.enabled=false: nothing to compute")
    rows = {r["label"]: r for r in results["family"]}
    for choice in dict.fromkeys(m.choice for m in members):
        lm, scorer = load(choice, v.compute)
        for m in (m for m in members if m.choice == choice):
            t = time.time()
            rows[m.label]["loogle"] = loogle_target.member_part(
                v.compute, m, lm, scorer, loogle, o.loogle.count
            )
            timing[f"member {m.label} LooGLE"] = timing[f"member {m.label}"] = time.time() - t
    results["loogle"] = loogle_target.record(loogle, o.loogle)
    results["loogle"]["correlations"] = loogle_target.correlations(results["family"], o.loogle)
    write_bytes_atomic(
        Path(o.docs_dir) / "loogle-gain.png",
        figures.loogle_png(results["family"], results["loogle"]["correlations"]),
    )
    first_doc = results["synthetic"]["documents"][0]["id"]
    return write_results(v, json.loads(json.dumps(results)), timing, started, first_doc)


def keytokens_on(v: ValidateSettings, corpus: Path, work: Path) -> Path:
    """The keytokens stage on the synthetic corpus (a fresh artifact when ``fresh``), its settings
    composed from ``conf/keytokens.yaml`` with this study's evaluator and settings; its directory."""
    overrides = ["corpus=local", "corpus.name=longeval", f"corpus.path={json.dumps(str(corpus))}"]
    overrides += [f"output_dir={json.dumps(str(work / 'keytokens'))}", "max_tokens=null", "name=null"]
    overrides += v.overrides(STAGE1_KEYS)
    settings = replace(v.keytokens_for(overrides), evaluator=v.evaluator)
    return family.build_keytokens(settings, v.options.fresh)


def identification_part(
    v: ValidateSettings, artifact: KeyTokenArtifact, docs: list[synthetic.SyntheticDocument], out: Path
) -> tuple[study.QATokens, dict[str, Any]]:
    """The evaluator's question-and-answer tokens, their figure, the key-token page of the first
    document, and what results.json records of the synthetic corpus and its artifact."""
    tokens = study.qa_tokens(artifact, docs)
    png = figures.identification_png(tokens, v.definition.alpha, v.definition.beta)
    write_bytes_atomic(out / "identification.png", png)
    write_page(artifact.root, out / f"keytokens-{docs[0].id}.html", docs[0].id)
    return tokens, {
        "documents": [{"id": d.id, "answers": d.answers, "queried_lines": d.queried_lines} for d in docs],
        "artifact": artifact.root.name,
        "artifact_fingerprint": artifact.manifest["fingerprint"],
        "tokens_sha256": artifact.manifest["files"]["tokens.parquet"]["sha256"],
        "evaluator_tokens": int(np.asarray(artifact.documents["n_tokens"]).sum()),
        "qa_tokens": len(tokens.lsd),
        "answer_tokens": int(tokens.answer.sum()),
        "response_tokens": int(tokens.response.sum()),
        "answer_tokens_lcl": _quartiles(tokens.lcl[tokens.answer]),
        "answer_tokens_short_logprob": _quartiles(tokens.short[tokens.answer]),
    }


def load(choice: ModelChoice, compute: Compute) -> tuple[LoadedModel, TargetScorer]:
    """A model with this run's compute settings, and its scorer."""
    lm = choice.load(compute)
    return lm, scorer_for(lm, compute)


def evaluator_retrieval(
    v: ValidateSettings,
    docs: list[synthetic.SyntheticDocument],
    members: list[family.Member],
    rows: list[dict[str, Any]],
) -> dict[str, Any]:
    """Can the evaluator itself retrieve the answers, with the full context and with stage 1's? The
    full-context numbers are a family member's when the evaluator is one (the same computation)."""
    choice = v.evaluator
    same = [
        r
        for m, r in zip(members, rows, strict=True)
        if m.context_limit is None and same_model(m.choice, choice)
    ]
    lm, scorer = load(choice, v.compute)
    keys = ("token_accuracy", "answer_exact_match", "answer_ppl", "other_ppl", "n_answer_tokens", "n_answers")
    return {
        "full": {k: same[0][k] for k in keys} if same else study.retrieval(lm, scorer, docs, None),
        "short": study.retrieval(lm, scorer, docs, v.definition.K + v.definition.d),
    }


def same_model(a: ModelChoice, b: ModelChoice) -> bool:
    return (a.spec, a.revision, a.attn_implementation) == (b.spec, b.revision, b.attn_implementation)


def recorded_settings(v: ValidateSettings, members: list[family.Member]) -> dict[str, Any]:
    values = dataclasses.asdict(v.options) | dataclasses.asdict(v.definition)
    settings = {k: v.evaluator.spec if k == "evaluator" else values[k] for k in SETTINGS}
    settings["members"] = [
        {
            "label": m.label,
            "model": m.choice.spec,
            "context_limit": m.context_limit,
            "checkpoint": m.checkpoint,
        }
        for m in members
    ]
    attention = {"evaluator": v.evaluator.attn_implementation}
    return settings | {"attention": attention | {m.label: m.choice.attn_implementation for m in members}}


def write_results(
    v: ValidateSettings, results: dict[str, Any], timing: dict[str, float], started: float, first_doc: str
) -> dict[str, Any]:
    """results.json (compared with the previous run's before it is replaced) and the report."""
    out, report_path = Path(v.options.docs_dir), Path(v.options.report)
    previous = out / "results.json"
    same = json.loads(previous.read_text()) == results if previous.exists() else None
    write_json_atomic(previous, results)
    timing["total"] = time.time() - started
    page = report.render(results, timing, out, f"keytokens-{first_doc}.html", v.grid, same, report_path)
    write_bytes_atomic(report_path, page.encode("utf-8"))
    comparison = {None: "no previous results", True: "identical to", False: "DIFFERENT from"}[same]
    print(f"wrote {report_path} and {out}/ in {timing['total']:.0f} s")
    print(f"results.json: {comparison}{' the previous run' if same is not None else ''}")
    return results


def _quartiles(values: np.ndarray) -> dict[str, float]:
    q = np.quantile(values, [0.25, 0.5, 0.75])
    return {"q1": float(q[0]), "median": float(q[1]), "q3": float(q[2])}
