"""The `make validate` run: the paper's two claims, checked with the embedded models on CPU.

1. Key-token identification: the keytokens stage with the embedded evaluator on seeded LongEval-style
   documents (``pipeline.validation.synthetic``), then ``study.identification``.
2. LongPPL against long-context ability: a family of models (both embedded models at several context
   limits, and fine-tuned checkpoints when given) scored against two evaluators' key tokens on the
   same GovReport documents (``pipeline.validation.family``, ``study.correlations``).

Writes ``docs/reports/validation.md`` (``pipeline.validation.report``), ``docs/reports/validation/*.png``,
the key-token page of one synthetic document and ``docs/reports/validation/results.json`` (every number;
no timings, so that two runs compare equal).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pydantic.dataclasses
from omegaconf import OmegaConf

from pipeline.artifact.reader import load_artifact
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.cli import compose
from pipeline.definition import DEFINITION_FIELDS, KeyTokenDefinition, Positive
from pipeline.files import write_bytes_atomic, write_json_atomic
from pipeline.hub import offline_unless
from pipeline.keytokens.settings import KeyTokenSettings
from pipeline.models.loading import LoadedModel, ModelChoice, is_local_model
from pipeline.models.logprobs import TargetScorer, scorer_for
from pipeline.provenance import file_sha256
from pipeline.reporting.keytoken_page import write_page
from pipeline.settings import Compute, NonNegative, ScoreSettings, field_names, parse
from pipeline.validation import family, figures, report, study, synthetic

# The settings results.json records (the evaluator and model by their spec).
SETTINGS = ("seed", "documents", "lines", "questions", "min_gap_lines", "evaluator", "K", "d")
SETTINGS += ("alpha", "beta", "gamma", "govreport_documents")
STAGE1_KEYS = (*DEFINITION_FIELDS, *field_names(Compute), "progress")


@pydantic.dataclasses.dataclass(frozen=True)
class ValidateOptions:
    """``conf/validate.yaml``'s own settings (the definition, the grid, the compute settings and the
    evaluator group are checked as their own types)."""

    seed: NonNegative
    documents: Positive
    lines: Positive
    questions: Positive
    min_gap_lines: NonNegative
    members: list[dict[str, Any]]
    govreport: str
    govreport_documents: Positive
    evaluators: list[dict[str, Any]]
    work_dir: str
    docs_dir: str
    report: str
    checkpoints: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    fresh: bool = True


def check_settings(cfg: Any) -> None:
    """Every setting of the study, checked before anything runs: one error line for the first bad one."""
    parse(ValidateOptions, cfg)
    parse(KeyTokenDefinition, cfg)
    parse(Compute, cfg)
    grid_of(cfg)
    ModelChoice.parse(cfg.evaluator, "evaluator.")


def run(cfg: Any) -> dict[str, Any]:
    """The whole study; returns the results written to ``<docs_dir>/results.json``."""
    check_settings(cfg)
    started, timing = time.time(), {}
    work, out = Path(cfg.work_dir), Path(cfg.docs_dir)
    members = family.members(cfg)  # the family and its evaluators first: a wrong one fails at once
    offline_unless(*(not is_local_model(m.choice.spec) for m in members))
    t = time.time()
    evals = family.evaluators(cfg, work)
    timing["evaluator artifacts"] = time.time() - t
    docs = synthetic.make_corpus(
        int(cfg.seed), int(cfg.documents), n_lines=int(cfg.lines), n_questions=int(cfg.questions),
        min_gap_lines=int(cfg.min_gap_lines),
    )  # fmt: skip
    corpus = synthetic.write_corpus(docs, work / "longeval.jsonl")
    t = time.time()
    artifact = load_artifact(keytokens_on(cfg, corpus, work))
    timing["stage 1 on the synthetic corpus"] = time.time() - t
    tokens, part1 = identification_part(cfg, artifact, docs, out)
    t = time.time()
    rows = family.score_family(cfg, members, docs, evals, lambda choice: load(choice, cfg), timing)
    timing["model family"] = time.time() - t
    t = time.time()
    evaluator = evaluator_retrieval(cfg, docs, members, rows)
    timing["evaluator retrieval"] = time.time() - t
    labels = [e.label for e in evals]
    stats = study.correlations(rows, labels)
    for metric, png in figures.family_pngs(rows, stats, labels).items():
        write_bytes_atomic(out / f"family-{metric}.png", png)
    results = {
        "settings": recorded_settings(cfg, members),
        "synthetic": {**part1, "corpus_sha256": file_sha256(corpus)},
        "identification": study.identification(tokens, grid_of(cfg)),
        "evaluator_retrieval": evaluator,
        "govreport": {
            "artifact": Path(str(cfg.govreport)).name,
            "documents": [d.doc_id for d in evals[0].documents],
        },
        "evaluators": [family.evaluator_record(e) for e in evals],
        "family": rows,
        "correlations": stats,
        "ranking": {label: study.ranking(stats[label]) for label in labels},
    }
    return write_results(cfg, json.loads(json.dumps(results)), timing, started, docs[0].id)


def keytokens_on(cfg: Any, corpus: Path, work: Path) -> Path:
    """The keytokens stage on the synthetic corpus (a fresh artifact when ``cfg.fresh``), its config
    composed from ``conf/keytokens.yaml`` with this study's evaluator and settings; its directory."""
    overrides = ["corpus=local", "corpus.name=longeval", f"corpus.path={json.dumps(str(corpus))}"]
    overrides += [f"output_dir={json.dumps(str(work / 'keytokens'))}", "max_tokens=null", "name=null"]
    overrides += [f"{key}={json.dumps(cfg[key])}" for key in STAGE1_KEYS]
    config = compose("keytokens", overrides)
    config.evaluator = cfg.evaluator
    return family.build_keytokens(KeyTokenSettings.from_config(config), cfg.fresh)


def identification_part(
    cfg: Any, artifact: KeyTokenArtifact, docs: list[synthetic.SyntheticDocument], out: Path
) -> tuple[study.QATokens, dict[str, Any]]:
    """The evaluator's question-and-answer tokens, their figure, the key-token page of the first
    document, and what results.json records of the synthetic corpus and its artifact."""
    tokens = study.qa_tokens(artifact, docs)
    png = figures.identification_png(tokens, float(cfg.alpha), float(cfg.beta))
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


def load(choice: ModelChoice, cfg: Any) -> tuple[LoadedModel, TargetScorer]:
    """A model with this run's compute settings, and its scorer."""
    compute = parse(Compute, cfg)
    lm = choice.load(compute)
    return lm, scorer_for(lm, compute)


def evaluator_retrieval(
    cfg: Any,
    docs: list[synthetic.SyntheticDocument],
    members: list[family.Member],
    rows: list[dict[str, Any]],
) -> dict[str, Any]:
    """Can the evaluator itself retrieve the answers, with the full context and with stage 1's? The
    full-context numbers are a family member's when the evaluator is one (the same computation)."""
    choice = ModelChoice.parse(cfg.evaluator, "evaluator.")
    same = [
        r
        for m, r in zip(members, rows, strict=True)
        if m.context_limit is None and same_model(m.choice, choice)
    ]
    lm, scorer = load(choice, cfg)
    keys = ("token_accuracy", "answer_exact_match", "answer_ppl", "other_ppl", "n_answer_tokens", "n_answers")
    return {
        "full": {k: same[0][k] for k in keys} if same else study.retrieval(lm, scorer, docs, None),
        "short": study.retrieval(lm, scorer, docs, int(cfg.K) + int(cfg.d)),
    }


def same_model(a: ModelChoice, b: ModelChoice) -> bool:
    return (a.spec, a.revision, a.attn_implementation) == (b.spec, b.revision, b.attn_implementation)


def recorded_settings(cfg: Any, members: list[family.Member]) -> dict[str, Any]:
    settings = {k: cfg.evaluator.spec if k == "evaluator" else cfg[k] for k in SETTINGS}
    settings["members"] = [
        {
            "label": m.label,
            "model": m.choice.spec,
            "context_limit": m.context_limit,
            "checkpoint": m.checkpoint,
        }
        for m in members
    ]
    attention = {"evaluator": cfg.evaluator.get("attn_implementation")}
    return settings | {"attention": attention | {m.label: m.choice.attn_implementation for m in members}}


def write_results(
    cfg: Any, results: dict[str, Any], timing: dict[str, float], started: float, first_doc: str
) -> dict[str, Any]:
    """results.json (compared with the previous run's before it is replaced) and the report."""
    out = Path(cfg.docs_dir)
    previous = out / "results.json"
    same = json.loads(previous.read_text()) == results if previous.exists() else None
    write_json_atomic(previous, results)
    timing["total"] = time.time() - started
    grid = grid_of(cfg)
    page = report.render(results, timing, out, f"keytokens-{first_doc}.html", grid, same, Path(cfg.report))
    write_bytes_atomic(Path(cfg.report), page.encode("utf-8"))
    comparison = {None: "no previous results", True: "identical to", False: "DIFFERENT from"}[same]
    print(f"wrote {cfg.report} and {out}/ in {timing['total']:.0f} s")
    print(f"results.json: {comparison}{' the previous run' if same is not None else ''}")
    return results


def grid_of(cfg: Any) -> list[tuple[float, float]]:
    """The (alpha, beta) grid of the identification table (``paper``: the paper's Table 2)."""
    return list(parse(ScoreSettings, {"grid": OmegaConf.to_container(cfg, resolve=True)["grid"]}).grid)


def _quartiles(values: np.ndarray) -> dict[str, float]:
    q = np.quantile(values, [0.25, 0.5, 0.75])
    return {"q1": float(q[0]), "median": float(q[1]), "q3": float(q[2])}
