"""The measurements of `make validate`: how well LSD and LCL identify the tokens that need long
context, and how each metric tracks retrieval ability over a family of models.

1. Key-token identification (paper Fig. 3, Fig. 4b): over the evaluator's tokens of the
   question-and-answer part of the synthetic documents, how well LSD alone, LCL alone and both
   separate the answer tokens (the digits of each answer) from the others.
2. Retrieval: the teacher-forced top-1 accuracy of the answer tokens, with at most W tokens of
   context (the windows of the score stage's ``context_limit``).
3. The family (``studies.validation.family``): per member, retrieval on the synthetic documents and
   PPL, LongPPL, LongPPL-soft and bits per byte on GovReport; then, per evaluator, the Pearson and
   Spearman correlation of each metric with the retrieval accuracy, and which metric ranks best.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pipeline import definition
from pipeline.artifact.reader import iter_documents
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.models.loading import LoadedModel
from pipeline.models.logprobs import TargetScorer
from pipeline.models.top1 import context_limited_top1
from pipeline.results.correlations import correlate
from pipeline.text.tokenization import encode_with_offsets
from studies.validation.synthetic import SyntheticDocument

# ----------------------------------------------------------------------------------------------
# Classification metrics


@dataclass(frozen=True)
class Confusion:
    """Counts of a binary classification of tokens: answer (positive) versus non-answer."""

    tp: int
    fp: int
    fn: int
    tn: int

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    @property
    def accuracy(self) -> float | None:
        return _ratio(self.tp + self.tn, self.n)

    @property
    def precision(self) -> float | None:
        return _ratio(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> float | None:
        return _ratio(self.tp, self.tp + self.fn)

    @property
    def specificity(self) -> float | None:
        return _ratio(self.tn, self.tn + self.fp)

    @property
    def balanced_accuracy(self) -> float | None:
        """Mean of recall and specificity: 0.5 for a guess, whatever the class balance."""
        if self.recall is None or self.specificity is None:
            return None
        return (self.recall + self.specificity) / 2

    def to_dict(self) -> dict[str, Any]:
        names = ("accuracy", "precision", "recall", "specificity", "balanced_accuracy")
        return {
            "tp": self.tp,
            "fp": self.fp,
            "fn": self.fn,
            "tn": self.tn,
            **{k: getattr(self, k) for k in names},
        }


def _ratio(a: int, b: int) -> float | None:
    return a / b if b else None


def confusion(predicted: np.ndarray, truth: np.ndarray) -> Confusion:
    predicted, truth = np.asarray(predicted, dtype=bool), np.asarray(truth, dtype=bool)
    return Confusion(
        tp=int((predicted & truth).sum()),
        fp=int((predicted & ~truth).sum()),
        fn=int((~predicted & truth).sum()),
        tn=int((~predicted & ~truth).sum()),
    )


def overlap_mask(offsets: np.ndarray, spans: list[list[int]]) -> np.ndarray:
    """Tokens ([start, end) character offsets, n x 2) that share a character with any span."""
    mask = np.zeros(len(offsets), dtype=bool)
    for start, end in spans:
        mask |= (offsets[:, 0] < end) & (offsets[:, 1] > start)
    return mask


def classifiers(lsd: np.ndarray, lcl: np.ndarray, alpha: float, beta: float) -> dict[str, np.ndarray]:
    """The three rules of paper Fig. 4b: LSD alone, LCL alone, and both (the key-token rule)."""
    with np.errstate(invalid="ignore"):
        both = definition.is_key(lsd, lcl, alpha, beta)
        return {"LSD": lsd > alpha, "LCL": lcl > beta, "LSD and LCL": both}


# ----------------------------------------------------------------------------------------------
# Part 1: key-token identification on the synthetic documents


@dataclass
class QATokens:
    """The evaluator's tokens of the question-and-answer parts of all documents."""

    doc_id: np.ndarray
    lsd: np.ndarray
    lcl: np.ndarray
    short: np.ndarray  # short-context log-prob
    answer: np.ndarray  # token overlaps an answer's digits
    response: np.ndarray  # token lies in an "Answer: ..." line (the paper's "standard response")


def qa_tokens(artifact: KeyTokenArtifact, docs: list[SyntheticDocument]) -> QATokens:
    by_id = {d.id: d for d in docs}
    names = ("doc_id", "lsd", "lcl", "short", "answer", "response")
    parts: dict[str, list[np.ndarray]] = {k: [] for k in names}
    for art in iter_documents(artifact):
        doc = by_id[art.doc_id]
        if art.text != doc.text:
            raise PipelineError(f"{art.doc_id}: the artifact's text is not the generated document")
        qa = art.eval_offsets[:, 0] >= doc.qa_start
        if np.isnan(art.lsd[qa]).any():
            raise PipelineError(
                f"{art.doc_id}: question-and-answer tokens without a short context (K too large)"
            )
        offsets = art.eval_offsets[qa]
        parts["doc_id"].append(np.full(int(qa.sum()), art.doc_id))
        parts["lsd"].append(art.lsd[qa])
        parts["lcl"].append(art.long[qa])
        parts["short"].append(art.long[qa] - art.lsd[qa])
        parts["answer"].append(overlap_mask(offsets, doc.answer_spans))
        parts["response"].append(overlap_mask(offsets, doc.response_spans))
    return QATokens(**{k: np.concatenate(v) for k, v in parts.items()})


def identification(tokens: QATokens, grid: list[tuple[float, float]]) -> list[dict[str, Any]]:
    """One row per scope (all question-and-answer tokens; the answer lines only), rule and threshold."""
    rows = []
    for scope, mask in (("qa", np.ones(len(tokens.lsd), dtype=bool)), ("responses", tokens.response)):
        lsd, lcl, truth = tokens.lsd[mask], tokens.lcl[mask], tokens.answer[mask]
        seen: set[str] = set()
        for alpha, beta in grid:
            rules = classifiers(lsd, lcl, alpha, beta)
            texts = {"LSD": f"LSD > {alpha:g}", "LCL": f"LCL > {beta:g}"}
            texts["LSD and LCL"] = f"LSD > {alpha:g} and LCL > {beta:g}"
            for name, predicted in rules.items():
                if texts[name] in seen:
                    continue
                seen.add(texts[name])
                rows.append(
                    {
                        "scope": scope,
                        "rule": name,
                        "threshold": texts[name],
                        **confusion(predicted, truth).to_dict(),
                    }
                )
    return rows


# ----------------------------------------------------------------------------------------------
# Retrieval: teacher-forced answer-token accuracy


def qa_positions(
    tokenizer: Any, doc: SyntheticDocument, bos_id: int | None
) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """The model's token sequence of a document (BOS first when given), the sequence positions of its
    question-and-answer tokens, and for each the index of the answer it belongs to (-1: none)."""
    enc = encode_with_offsets(tokenizer, doc.text)
    prefix = [] if bos_id is None else [bos_id]
    seq = torch.tensor(prefix + enc.ids.tolist(), dtype=torch.long)
    qa = np.flatnonzero(enc.offsets[:, 0] >= doc.qa_start)
    answer_of = np.full(len(qa), -1)
    for k, (start, end) in enumerate(doc.answer_spans):
        answer_of[(enc.offsets[qa, 0] < end) & (enc.offsets[qa, 1] > start)] = k
    return seq, qa + len(prefix), answer_of


def retrieval(
    lm: LoadedModel, scorer: TargetScorer, docs: list[SyntheticDocument], window: int | None
) -> dict[str, Any]:
    """Top-1 accuracy of the answer tokens given the true prefix (teacher forcing), exact match of
    whole answers, and the perplexity of answer tokens and of the other question-and-answer tokens,
    each token with at most ``window`` tokens of context (the windows of the score stage's context_limit)."""
    hits, logprobs, is_answer, exact = [], [], [], []
    for doc in docs:
        seq, positions, answer_of = qa_positions(lm.tokenizer, doc, lm.bos_token_id)
        lp, hit = context_limited_top1(scorer, seq, positions, window, bos_id=lm.bos_token_id)
        hits.append(hit)
        logprobs.append(lp)
        is_answer.append(answer_of >= 0)
        exact += [bool(hit[answer_of == k].all()) for k in range(len(doc.answers))]
    hit, lp, answer = np.concatenate(hits), np.concatenate(logprobs), np.concatenate(is_answer)
    return {
        "token_accuracy": float(hit[answer].mean()),
        "answer_exact_match": float(np.mean(exact)),
        "answer_ppl": math.exp(-float(lp[answer].mean())),
        "other_ppl": math.exp(-float(lp[~answer].mean())),
        "n_answer_tokens": int(answer.sum()),
        "n_answers": len(exact),
    }


# ----------------------------------------------------------------------------------------------
# Part 2: the model family (``studies.validation.family``): which metric tracks retrieval ability?

# The metrics correlated with the answer-token accuracy: (label, depends on the evaluator).
FAMILY_METRICS = {
    "ppl": ("PPL", False),
    "longppl": ("LongPPL", True),
    "longppl_soft": ("LongPPL-soft", True),
    "bpb": ("bits/byte", False),
    "key_bpb": ("key bits/byte", True),
}


def metric_value(row: dict[str, Any], metric: str, evaluator: str) -> float | None:
    """A member's value of a metric, against ``evaluator`` where it depends on one."""
    return row["evaluators"][evaluator][metric] if FAMILY_METRICS[metric][1] else row[metric]


def correlations(family: list[dict[str, Any]], evaluators: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Per evaluator, the Pearson and Spearman correlation (two-sided p) of each metric with the
    answer-token accuracy over the members that have a value."""
    out = {}
    for evaluator in evaluators:
        rows = []
        for metric, (label, dependent) in FAMILY_METRICS.items():
            pairs = [(metric_value(r, metric, evaluator), r["token_accuracy"]) for r in family]
            pairs = [(x, y) for x, y in pairs if x is not None]
            stats, note = correlate([x for x, _ in pairs], [y for _, y in pairs])
            rows.append({"metric": metric, "label": label, "evaluator_dependent": dependent, "n": len(pairs),
                         **stats, "note": note})  # fmt: skip
        out[evaluator] = rows
    return out


def ranking(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Which metric ranks the family best: the most negative Spearman rho with the accuracy (lower
    perplexity, higher accuracy); and LongPPL against PPL, key bits/byte against bits/byte."""
    rho = {r["metric"]: r["spearman_r"] for r in rows}
    return {
        **best_by_spearman(rho),
        "longppl_vs_ppl": compare(rho["longppl"], rho["ppl"]),
        "key_bpb_vs_bpb": compare(rho["key_bpb"], rho["bpb"]),
    }


def best_by_spearman(rho: dict[str, float | None]) -> dict[str, Any]:
    """The metrics with the most negative Spearman rho (ties together), and that rho."""
    defined = {m: v for m, v in rho.items() if v is not None}
    best_value = min(defined.values()) if defined else None
    best = [m for m, v in defined.items() if math.isclose(v, best_value, abs_tol=1e-12)] if defined else []
    return {"best": best, "best_spearman": best_value}


def compare(a: float | None, b: float | None) -> str | None:
    """'better', 'tie' or 'worse': whether rho ``a`` is more negative than ``b`` (None: undefined)."""
    if a is None or b is None:
        return None
    return "tie" if math.isclose(a, b, abs_tol=1e-12) else "better" if a < b else "worse"
