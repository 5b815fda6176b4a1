"""`make validate` (issue #6): the paper's two claims, checked with the embedded models on CPU.

1. Key-token identification (paper Fig. 3, Fig. 4b): stage 1 with the embedded evaluator on seeded
   LongEval-style documents (``pipeline.synthetic``); over the evaluator's tokens of the
   question-and-answer part, how well LSD alone, LCL alone and both separate the answer tokens (the
   digits of each answer) from the others, for the paper's (alpha, beta) grid.
2. LongPPL tracks long-context ability, PPL less so (paper Table 1, in miniature): the embedded
   evaluated model with its context limited to W tokens (stage 2's ``context_limit``) is a family
   of models whose long-context ability is known to grow with W. For each W: the teacher-forced
   answer-token accuracy on the synthetic documents, and PPL, LongPPL and LongPPL-soft on the
   GovReport artifact; then the Pearson and Spearman correlation of each metric with that accuracy.

Writes ``docs/validation.md``, ``docs/validation/*.png``, the key-token page of one synthetic
document and ``docs/validation/results.json`` (every number; no timings, so that two runs compare
equal). Run as ``python -m pipeline.validation [key=value ...]`` (``conf/validate.yaml``).
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import scoring, synthetic, validation_report
from pipeline.cli import CONF_DIR, hydra_main
from pipeline.errors import PipelineError

METRICS = {"ppl": "PPL", "longppl": "LongPPL", "longppl_soft": "LongPPL-soft"}
SETTINGS = ("seed", "documents", "lines", "questions", "min_gap_lines", "evaluator", "K", "d")
SETTINGS += ("alpha", "beta", "gamma", "model", "govreport_documents")
SYNTHETIC_METRICS = {
    "answer_ppl": "answer-token PPL (synthetic)",
    "other_ppl": "other QA-token PPL (synthetic)",
}


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
    from pipeline.keytokens import is_key

    with np.errstate(invalid="ignore"):
        return {"LSD": lsd > alpha, "LCL": lcl > beta, "LSD and LCL": is_key(lsd, lcl, alpha, beta)}


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


def qa_tokens(artifact: Any, docs: list[synthetic.SyntheticDocument]) -> QATokens:
    by_id = {d.id: d for d in docs}
    names = ("doc_id", "lsd", "lcl", "short", "answer", "response")
    parts: dict[str, list[np.ndarray]] = {k: [] for k in names}
    for view in scoring.iter_documents(artifact):
        doc = by_id[view.doc_id]
        if view.text != doc.text:
            raise PipelineError(f"{view.doc_id}: the artifact's text is not the generated document")
        qa = view.eval_offsets[:, 0] >= doc.qa_start
        if np.isnan(view.lsd[qa]).any():
            raise PipelineError(
                f"{view.doc_id}: question-and-answer tokens without a short context (K too large)"
            )
        offsets = view.eval_offsets[qa]
        parts["doc_id"].append(np.full(int(qa.sum()), view.doc_id))
        parts["lsd"].append(view.lsd[qa])
        parts["lcl"].append(view.long[qa])
        parts["short"].append(view.long[qa] - view.lsd[qa])
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


def run_stage1(cfg: Any, corpus: Path, work: Path) -> Path:
    """Stage 1 on the synthetic corpus (a fresh artifact when ``cfg.fresh``); returns its directory."""
    from omegaconf import OmegaConf

    from pipeline import stage1

    s1 = OmegaConf.load(CONF_DIR / "keytokens.yaml")
    for key in ("defaults", "hydra"):
        s1.pop(key)
    s1.evaluator = OmegaConf.load(CONF_DIR / "evaluator" / f"{cfg.evaluator}.yaml")
    s1.corpus = OmegaConf.merge(
        OmegaConf.load(CONF_DIR / "corpus" / "local.yaml"), {"name": "longeval", "path": str(corpus)}
    )
    for key in ("K", "d", "alpha", "beta", "gamma", "dtype", "device", "head_chunk", "vocab_tile"):
        s1[key] = cfg[key]
    s1.update(
        max_tokens=None, window_batch_tokens=cfg.window_batch_tokens, cache_dir=cfg.cache_dir,
        progress=cfg.progress, output_dir=str(work / "keytokens"), name=None,
    )  # fmt: skip
    root = work / "keytokens" / stage1.artifact_name(s1)
    if cfg.fresh and root.exists():
        shutil.rmtree(root)
    stage1.run(s1)
    return root


# ----------------------------------------------------------------------------------------------
# Retrieval: teacher-forced answer-token accuracy


def qa_positions(tokenizer: Any, doc: synthetic.SyntheticDocument, bos_id: int | None):
    """The model's token sequence of a document (BOS first when given), the sequence positions of its
    question-and-answer tokens, and for each the index of the answer it belongs to (-1: none)."""
    import torch

    from pipeline.models import encode_with_offsets

    enc = encode_with_offsets(tokenizer, doc.text)
    prefix = [] if bos_id is None else [bos_id]
    seq = torch.tensor(prefix + enc.ids.tolist(), dtype=torch.long)
    qa = np.flatnonzero(enc.offsets[:, 0] >= doc.qa_start)
    answer_of = np.full(len(qa), -1)
    for k, (start, end) in enumerate(doc.answer_spans):
        answer_of[(enc.offsets[qa, 0] < end) & (enc.offsets[qa, 1] > start)] = k
    return seq, qa + len(prefix), answer_of


def retrieval(
    lm: Any, scorer: Any, docs: list[synthetic.SyntheticDocument], window: int | None
) -> dict[str, Any]:
    """Top-1 accuracy of the answer tokens given the true prefix (teacher forcing), exact match of
    whole answers, and the perplexity of answer tokens and of the other question-and-answer tokens,
    each token with at most ``window`` tokens of context (the windows of stage 2's context_limit)."""
    from pipeline.logprobs import context_limited_top1

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
# Part 2: the controlled model family


def govreport_views(path: Path, n: int) -> list[scoring.DocumentView]:
    from pipeline.artifacts import load_artifact

    if not (path / "manifest.json").exists():
        raise PipelineError(f"no key-token artifact at {path}: run `make keytokens` first (about 7 minutes)")
    return list(scoring.iter_documents(load_artifact(path)))[:n]


def family_row(cfg: Any, lm: Any, scorer: Any, docs, views, window: int | None) -> dict[str, Any]:
    """Retrieval on the synthetic documents and PPL, LongPPL, LongPPL-soft on GovReport, at context W."""
    settings = scoring.ScoreSettings(
        context_limit=window,
        head_chunk=int(cfg.head_chunk),
        vocab_tile=cfg.vocab_tile,
        window_batch_tokens=int(cfg.window_batch_tokens),
    )
    scores = [scoring.score_document(lm, scorer, view, settings) for view in views]
    corpus = scoring.corpus_summary(scores)
    row = {"window": window, "label": "full" if window is None else f"W={window}"}
    row.update(retrieval(lm, scorer, docs, window))
    row.update({k: corpus[k] for k in (*METRICS, "n_tokens", "n_key_tokens")})
    return row


def correlations(family: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pearson and Spearman correlation (two-sided p) of each metric with the retrieval accuracy."""
    from pipeline.leaderboard import _correlate

    accuracy = [r["token_accuracy"] for r in family]
    rows = []
    for metric, label in {**METRICS, **SYNTHETIC_METRICS}.items():
        stats, note = _correlate([r[metric] for r in family], accuracy)
        rows.append({"metric": metric, "label": label, "n": len(family), **stats, "note": note})
    return rows


# ----------------------------------------------------------------------------------------------
# Pictures


def identification_png(tokens: QATokens, alpha: float, beta: float) -> bytes:
    """Paper Fig. 3 for these documents: LSD of answer and other tokens, LCL of those with LSD > 0.5,
    and both at once with the thresholds."""
    from pipeline.leaderboard import _figure, _png

    fig = _figure((13.0, 3.8))
    ax_lsd, ax_lcl, ax_both = fig.subplots(1, 3)
    groups = (("answer tokens", tokens.answer, "tab:red"), ("other tokens", ~tokens.answer, "tab:blue"))
    bins = np.linspace(min(-2.0, float(tokens.lsd.min())), max(6.0, float(tokens.lsd.max())), 41)
    for label, mask, color in groups:
        ax_lsd.hist(
            tokens.lsd[mask],
            bins=bins,
            density=True,
            alpha=0.55,
            color=color,
            label=f"{label} ({mask.sum()})",
        )
    ax_lsd.axvline(alpha, color="k", ls="--", lw=1)
    ax_lsd.set(
        xlabel="LSD (long - short log-prob)", ylabel="density", title="(a) LSD, question-and-answer tokens"
    )
    high = tokens.lsd > 0.5
    lcl_bins = np.linspace(float(tokens.lcl[high].min()) if high.any() else -10.0, 0.0, 31)
    for label, mask, color in groups:
        ax_lcl.hist(
            tokens.lcl[mask & high],
            bins=lcl_bins,
            alpha=0.55,
            color=color,
            label=f"{label} ({(mask & high).sum()})",
        )
    ax_lcl.axvline(beta, color="k", ls="--", lw=1)
    ax_lcl.set(
        xlabel="LCL (long-context log-prob)", ylabel="tokens", title="(b) LCL of tokens with LSD > 0.5"
    )
    for label, mask, color in reversed(groups):
        ax_both.scatter(tokens.lsd[mask], tokens.lcl[mask], s=6, alpha=0.5, color=color, label=label)
    ax_both.axvline(alpha, color="k", ls="--", lw=1)
    ax_both.axhline(beta, color="k", ls="--", lw=1)
    ax_both.set(xlabel="LSD", ylabel="LCL", title=f"(c) key: LSD > {alpha:g} and LCL > {beta:g}")
    for ax in (ax_lsd, ax_lcl, ax_both):
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def family_png(family: list[dict[str, Any]], stats: list[dict[str, Any]]) -> bytes:
    """Each metric against the retrieval accuracy, one labelled point per context limit W."""
    from pipeline.leaderboard import _figure, _labelled_scatter, _png
    from pipeline.validation_report import fmt

    by_metric = {r["metric"]: r for r in stats}
    shown = {**METRICS, "answer_ppl": "answer-token PPL"}
    fig = _figure((4.0 * len(shown), 3.6))
    xs = [r["token_accuracy"] for r in family]
    for ax, (metric, label) in zip(fig.subplots(1, len(shown)), shown.items(), strict=True):
        _labelled_scatter(ax, xs, [r[metric] for r in family], [r["label"] for r in family])
        r = by_metric[metric]
        ax.set(xlabel="answer-token accuracy (synthetic)", ylabel=label)
        ax.set_title(f"{label}: Pearson {fmt(r['pearson_r'], '.2f')}, Spearman {fmt(r['spearman_r'], '.2f')}",
                     fontsize=9)  # fmt: skip
    fig.tight_layout()
    return _png(fig)


# ----------------------------------------------------------------------------------------------
# The run


def _load(group: str, name: str, cfg: Any):
    """A model as its Hydra group file describes it (``conf/<group>/<name>.yaml``: attention
    implementation and all), with this run's dtype and device, and its chunked scorer."""
    from omegaconf import OmegaConf

    from pipeline.logprobs import TargetScorer
    from pipeline.models import load_configured_model

    path = CONF_DIR / group / f"{name}.yaml"
    if not path.exists():
        raise PipelineError(f"no {group} '{name}' ({path} is missing)")
    lm = load_configured_model(OmegaConf.load(path), cfg)
    return lm, TargetScorer(lm.model, head_chunk=int(cfg.head_chunk), vocab_tile=cfg.vocab_tile)


def run(cfg: Any) -> dict[str, Any]:
    """The whole study; returns the results written to ``<docs_dir>/results.json``."""
    import os

    from hydra.utils import to_absolute_path
    from tqdm.auto import tqdm

    from pipeline.artifacts import load_artifact, write_bytes_atomic, write_json_atomic

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = time.time()
    timing: dict[str, float] = {}
    work, out = Path(to_absolute_path(cfg.work_dir)), Path(to_absolute_path(cfg.docs_dir))
    grid = [(float(a), float(b)) for a, b in cfg.grid]
    docs = synthetic.make_corpus(
        int(cfg.seed), int(cfg.documents), n_lines=int(cfg.lines), n_questions=int(cfg.questions),
        min_gap_lines=int(cfg.min_gap_lines),
    )  # fmt: skip
    corpus = synthetic.write_corpus(docs, work / "longeval.jsonl")

    t = time.time()
    root = run_stage1(cfg, corpus, work)
    artifact = load_artifact(root)
    timing["stage 1 on the synthetic corpus"] = time.time() - t
    tokens = qa_tokens(artifact, docs)
    ident = identification(tokens, grid)
    write_bytes_atomic(
        out / "identification.png", identification_png(tokens, float(cfg.alpha), float(cfg.beta))
    )
    view_page = out / f"keytokens-{docs[0].id}.html"
    shutil.copyfile(root.parent.parent / "views" / root.name / f"{docs[0].id}.html", view_page)

    t = time.time()
    lm, scorer = _load("evaluator", str(cfg.evaluator), cfg)
    evaluator = {
        "full": retrieval(lm, scorer, docs, None),
        "short": retrieval(lm, scorer, docs, int(cfg.K) + int(cfg.d)),
    }
    del lm, scorer
    timing["evaluator retrieval"] = time.time() - t

    t = time.time()
    views = govreport_views(Path(to_absolute_path(cfg.govreport)), int(cfg.govreport_documents))
    lm, scorer = _load("model", str(cfg.model), cfg)
    windows = [None if w is None else int(w) for w in cfg.windows]
    family = [
        family_row(cfg, lm, scorer, docs, views, w)
        for w in tqdm(windows, desc="model family", unit="variant", disable=not cfg.progress)
    ]
    timing["model family"] = time.time() - t
    stats = correlations(family)
    write_bytes_atomic(out / "family.png", family_png(family, stats))

    results = {
        "settings": {k: cfg[k] for k in SETTINGS} | {"attention": _attention(cfg)},
        "synthetic": {
            "documents": [{"id": d.id, "answers": d.answers, "queried_lines": d.queried_lines} for d in docs],
            "corpus_sha256": _sha256(corpus),
            "artifact": root.name,
            "artifact_fingerprint": artifact.manifest["fingerprint"],
            "tokens_sha256": artifact.manifest["files"]["tokens.parquet"]["sha256"],
            "evaluator_tokens": int(np.asarray(artifact.documents["n_tokens"]).sum()),
            "qa_tokens": len(tokens.lsd),
            "answer_tokens": int(tokens.answer.sum()),
            "response_tokens": int(tokens.response.sum()),
            "answer_tokens_lcl": _quartiles(tokens.lcl[tokens.answer]),
            "answer_tokens_short_logprob": _quartiles(tokens.short[tokens.answer]),
        },
        "identification": ident,
        "evaluator_retrieval": evaluator,
        "govreport": {"artifact": Path(str(cfg.govreport)).name, "documents": [v.doc_id for v in views]},
        "family": family,
        "correlations": stats,
    }  # fmt: skip
    results = json.loads(json.dumps(results))  # plain types (OmegaConf values, numpy scalars)
    previous = out / "results.json"
    same = json.loads(previous.read_text()) == results if previous.exists() else None
    write_json_atomic(previous, results)
    timing["total"] = time.time() - started
    report = validation_report.render(results, timing, Path(cfg.docs_dir), view_page.name, same)
    write_bytes_atomic(Path(to_absolute_path(cfg.report)), report.encode("utf-8"))
    comparison = {None: "no previous results", True: "identical to", False: "DIFFERENT from"}[same]
    print(f"wrote {to_absolute_path(cfg.report)} and {out}/ in {timing['total']:.0f} s")
    print(f"results.json: {comparison}{' the previous run' if same is not None else ''}")
    return results


def _attention(cfg: Any) -> dict[str, str | None]:
    """The attention implementation each model ran with (from its group file)."""
    from omegaconf import OmegaConf

    groups = {"evaluator": str(cfg.evaluator), "model": str(cfg.model)}
    files = {g: CONF_DIR / g / f"{n}.yaml" for g, n in groups.items()}
    return {g: OmegaConf.load(path).get("attn_implementation") for g, path in files.items()}


def _quartiles(values: np.ndarray) -> dict[str, float]:
    q = np.quantile(values, [0.25, 0.5, 0.75])
    return {"q1": float(q[0]), "median": float(q[1]), "q3": float(q[2])}


def _sha256(path: Path) -> str:
    from pipeline.provenance import file_sha256

    return file_sha256(path)


def main() -> None:
    hydra_main("validate", run)


if __name__ == "__main__":
    main()
