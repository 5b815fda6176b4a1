"""`make longce-demo`: does LongCE beat CE here? A small CPU experiment, not a test.

SmolLM2-135M is fine-tuned twice from the same checkpoint, with plain CE and with LongCE (weights
from the model itself, the paper's method), for the same number of steps on the same seeded
LongEval-style documents (``studies.validation.synthetic``) in the same order, through `make
finetune`'s machinery (``pipeline.training.trainer.finetune``). Before and after, for both: the teacher-forced
answer-token accuracy on held-out documents of the same kind (``study.retrieval``, as `make validate`)
and PPL, LongPPL and LongPPL-soft on the GovReport artifact (the score stage's engine).

Writes ``docs/reports/longce-demo.md`` (``longce_report``), ``docs/reports/longce-demo/curves.png`` (both
training curves) and ``docs/reports/longce-demo/results.json``; the fine-tuned models go to
``<work_dir>/<run>/final``. Run as
``python -m studies.longce_demo [key=value ...]`` (``conf/longce_demo.yaml``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pydantic.dataclasses
from pydantic import Field

from pipeline.artifact.reader import iter_documents, open_artifact
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.definition import KeyTokenDefinition, Positive
from pipeline.files import write_bytes_atomic, write_json_atomic
from pipeline.jobs.recipe import offline_unless
from pipeline.models.loading import LoadedModel, ModelChoice
from pipeline.models.logprobs import TargetScorer, scorer_for
from pipeline.models.sources import is_local_model
from pipeline.score.engine import score
from pipeline.settings import Compute, NonNegative, ScoreSettings, parse
from pipeline.text.corpus import Document
from pipeline.training.longce import LongCESettings
from pipeline.training.sequences import build_sequences
from pipeline.training.trainer import finetune, training_arguments
from studies.longce import longce_report
from studies.validation import study, synthetic

SETTINGS = ("seed", "train_documents", "eval_documents", "lines", "questions", "min_gap_lines", "model")
SETTINGS += ("K", "d", "gamma", "steps", "learning_rate", "warmup_steps", "govreport_documents", "dtype")


@pydantic.dataclasses.dataclass(frozen=True)
class DemoOptions:
    """``conf/longce_demo.yaml``'s own settings (the definition, the compute settings and the model
    group are checked as their own types)."""

    seed: NonNegative
    train_documents: Positive
    eval_documents: Positive
    lines: Positive
    questions: Positive
    min_gap_lines: NonNegative
    steps: Positive
    learning_rate: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    warmup_steps: NonNegative
    govreport: str
    govreport_documents: Positive
    work_dir: str
    docs_dir: str
    report: str


@dataclass(frozen=True)
class DemoSettings:
    """Everything the experiment reads, typed at the command's door."""

    options: DemoOptions
    model: ModelChoice
    definition: KeyTokenDefinition  # K, d and gamma of LongCE (self)
    compute: Compute
    progress: bool
    recorded: dict[str, Any]  # SETTINGS as results.json records them (the model by its spec)
    changed: dict[str, Any]  # those that differ from conf/longce_demo.yaml (a reduced run says so)


def documents(o: DemoOptions) -> tuple[list[synthetic.SyntheticDocument], list[synthetic.SyntheticDocument]]:
    """Training documents 0..T-1 and held-out documents T..T+E-1 of the seeded generator."""
    kwargs = {"n_lines": o.lines, "n_questions": o.questions, "min_gap_lines": o.min_gap_lines}
    n_train, n_eval = o.train_documents, o.eval_documents
    make = synthetic.make_document
    train = [make(o.seed, i, **kwargs) for i in range(n_train)]
    held_out = [make(o.seed, i, **kwargs) for i in range(n_train, n_train + n_eval)]
    return train, held_out


def load(settings: DemoSettings) -> tuple[LoadedModel, TargetScorer]:
    """A fresh copy of the model as its group describes it, and its chunked scorer."""
    lm = settings.model.load(settings.compute)
    return lm, scorer_for(lm, settings.compute)


def evaluate(
    settings: DemoSettings,
    lm: LoadedModel,
    scorer: TargetScorer,
    held_out: list[synthetic.SyntheticDocument],
    govreport: KeyTokenArtifact,
) -> dict[str, Any]:
    """Answer-token accuracy on the held-out documents (full context) and the GovReport metrics of
    the first ``govreport_documents`` documents (the score call)."""
    lm.model.eval()
    row = study.retrieval(lm, scorer, held_out, None)
    documents = settings.options.govreport_documents
    corpus = score(govreport, lm, ScoreSettings(), settings.compute, documents=documents).corpus
    row.update({k: corpus[k] for k in ("ppl", "longppl", "longppl_soft", "n_tokens", "n_key_tokens")})
    return row


def train(
    settings: DemoSettings,
    source: str,
    lm: LoadedModel,
    train_docs: list[synthetic.SyntheticDocument],
    work: Path,
) -> dict[str, Any]:
    """One fine-tuning run through `make finetune`'s machinery; returns its record and curve."""
    docs = [Document(d.id, d.text) for d in train_docs]
    sequences, _ = build_sequences(docs, lm.tokenizer, max_length=lm.context_length or 10**9)
    o, d = settings.options, settings.definition
    values = {"K": d.K, "d": d.d, "gamma": d.gamma, "short_window_bos": False}  # the reference's
    loss = LongCESettings(source, parse(KeyTokenDefinition, values), settings.compute)
    training = {
        "max_steps": o.steps, "learning_rate": float(o.learning_rate),
        "warmup_steps": o.warmup_steps, "lr_scheduler_type": "linear", "weight_decay": 0.0,
        "adam_beta1": 0.9, "adam_beta2": 0.95, "per_device_train_batch_size": 1, "logging_steps": 1,
        "save_strategy": "no", "report_to": "none", "disable_tqdm": not settings.progress,
    }  # fmt: skip
    args = training_arguments(work / source, training, "cpu", o.seed)
    record = {"loss": dataclasses.asdict(loss), "training": training, "model": lm.source.to_dict()}
    cpu = cpu_seconds()
    record = finetune(lm, sequences, loss, args, record)
    cpu = cpu_seconds() - cpu
    rows = [json.loads(line) for line in (work / source / "metrics.jsonl").read_text().splitlines()]
    curve = [r for r in rows if "loss" in r]
    seconds = float(record["train_metrics"]["train_runtime"])
    return {
        "steps": record["steps"],
        "train_seconds": seconds,
        "seconds_per_step": seconds / max(record["steps"], 1),
        "cpu_seconds_per_step": cpu / max(record["steps"], 1),
        "tokens_per_step": sum(len(s.input_ids) for s in sequences) / len(sequences),
        "curve": [{k: r.get(k) for k in longce_report.CURVE_KEYS} for r in curve],
    }


def cpu_seconds() -> float:
    """User and system time of this process so far, all threads: about twice the wall time a
    phase takes on 2 cores of its own, whatever else the machine runs."""
    times = os.times()
    return times.user + times.system


class Phase:
    """Records the wall and CPU seconds of a block under ``timing[name]``."""

    def __init__(self, timing: dict[str, dict[str, float]], name: str):
        self.timing, self.name = timing, name

    def __enter__(self) -> Phase:
        self.wall, self.cpu = time.time(), cpu_seconds()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.timing[self.name] = {"wall": time.time() - self.wall, "cpu": cpu_seconds() - self.cpu}


def run_demo(settings: DemoSettings) -> dict[str, Any]:
    """Both runs, evaluated before and after, offline unless the model needs the Hub; writes
    results.json, the curves and the report."""
    with offline_unless(not is_local_model(settings.model.spec)):
        return both_runs(settings)


def both_runs(settings: DemoSettings) -> dict[str, Any]:
    started, o = time.time(), settings.options
    work, out = Path(o.work_dir), Path(o.docs_dir)
    govreport = open_artifact(o.govreport)
    govreport_docs = list(iter_documents(govreport))[: o.govreport_documents]
    train_docs, held_out = documents(o)
    timing: dict[str, dict[str, float]] = {}

    with Phase(timing, "evaluation before training"):
        lm, scorer = load(settings)
        results: dict[str, Any] = {"before": evaluate(settings, lm, scorer, held_out, govreport)}
    for source, label in longce_report.RUNS.items():
        with Phase(timing, f"training, {label}"):
            lm, scorer = load(settings)
            print(f"fine-tuning with {label} for {o.steps} steps", flush=True)
            results[source] = train(settings, source, lm, train_docs, work)
        with Phase(timing, f"evaluation after {label}"):
            results[source]["after"] = evaluate(settings, lm, scorer, held_out, govreport)
        del lm, scorer
    results["settings"] = settings.recorded | {"govreport": govreport.root.name}
    results["changed_from_defaults"] = settings.changed
    results["documents"] = {
        "train": [d.id for d in train_docs], "held_out": [d.id for d in held_out],
        "govreport": [g.doc_id for g in govreport_docs],
    }  # fmt: skip
    results = json.loads(json.dumps(results, default=float))  # plain types
    write_json_atomic(out / "results.json", results)
    write_bytes_atomic(out / "curves.png", longce_report.curves_png(results))
    timing["total"] = {"wall": time.time() - started, "cpu": cpu_seconds()}
    report_path = Path(o.report)
    report = longce_report.render(results, timing, out, report_path)
    write_bytes_atomic(report_path, report.encode("utf-8"))
    print(f"wrote {report_path} and {out}/ in {timing['total']['wall']:.0f} s")
    return results
