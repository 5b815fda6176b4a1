"""`make validate`'s parts on small inputs: the synthetic documents, the classification metrics, the
top-1 predictions in stage 2's windows, retrieval accuracy and the report."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from pipeline.corpus import CorpusSpec, load_corpus
from pipeline.logprobs import TargetScorer, context_limited_logprobs, context_limited_top1
from pipeline.validation import report, study, synthetic
from tests.conftest import build_model

# ----------------------------------------------------------------------------------------------
# The generator


def test_generator_is_deterministic_and_seeded():
    assert synthetic.make_corpus(3, 2, n_lines=40, n_questions=4, min_gap_lines=8) == synthetic.make_corpus(
        3, 2, n_lines=40, n_questions=4, min_gap_lines=8
    )
    assert synthetic.make_document(3, 0).text != synthetic.make_document(4, 0).text
    assert synthetic.make_document(3, 0).text != synthetic.make_document(3, 1).text


def test_answer_spans_point_at_the_queried_lines():
    doc = synthetic.make_document(0, 0, n_lines=60, n_questions=6, min_gap_lines=10)
    text = doc.text
    record = text[len(synthetic.HEADER) : doc.qa_start - len(synthetic.QA_INTRO)].split("\n")[:-1]
    assert len(record) == doc.n_lines == 60
    lines = dict(re.fullmatch(r"line (\S+): REGISTER_CONTENT is <(\d{5})>", r).groups() for r in record)
    assert len(lines) == 60  # distinct names
    assert len(set(doc.queried_lines)) == 6
    assert all(q < 60 - 10 for q in doc.queried_lines)  # never in the last min_gap_lines lines
    qa = text[doc.qa_start :].split("\n")[:-1]
    assert len(qa) == 12
    for k, (start, end) in enumerate(doc.answer_spans):
        question, answer = qa[2 * k], qa[2 * k + 1]
        name = re.fullmatch(r"Question: what is the <REGISTER_CONTENT> in line (\S+)\?", question).group(1)
        assert record[doc.queried_lines[k]].startswith(f"line {name}:")
        assert text[start:end] == doc.answers[k] == lines[name]
        assert answer == f"Answer: The <REGISTER_CONTENT> in line {name} is <{doc.answers[k]}>."
        r_start, r_end = doc.response_spans[k]
        assert text[r_start:r_end] == answer and r_start <= start < end <= r_end
        assert start > doc.qa_start


def test_queried_depths_are_stratified():
    rng = np.random.default_rng(0)
    picks = sorted(synthetic.queried_lines(rng, 100, 4, 20))
    assert [p // 20 for p in picks] == [0, 1, 2, 3]  # one in each quarter of lines 0..79
    with pytest.raises(ValueError):
        synthetic.queried_lines(rng, 10, 4, 8)


def test_corpus_reads_back_and_as_a_stage1_corpus(tmp_path):
    docs = synthetic.make_corpus(1, 2, n_lines=20, n_questions=2, min_gap_lines=4)
    path = synthetic.write_corpus(docs, tmp_path / "c.jsonl")
    assert synthetic.read_corpus(path) == docs
    loaded = load_corpus(CorpusSpec(name="longeval", path=str(path), id_field="id"))
    assert [(d.id, d.text) for d in loaded] == [(d.id, d.text) for d in docs]


# ----------------------------------------------------------------------------------------------
# Classification metrics


def test_confusion_metrics_on_a_hand_made_example():
    truth = np.array([1, 1, 1, 0, 0, 0, 0, 0, 0, 0], dtype=bool)
    predicted = np.array([1, 1, 0, 1, 0, 0, 0, 0, 0, 0], dtype=bool)
    c = study.confusion(predicted, truth)
    assert (c.tp, c.fp, c.fn, c.tn) == (2, 1, 1, 6)
    assert c.accuracy == pytest.approx(0.8)
    assert c.precision == pytest.approx(2 / 3)
    assert c.recall == pytest.approx(2 / 3)
    assert c.specificity == pytest.approx(6 / 7)
    assert c.balanced_accuracy == pytest.approx((2 / 3 + 6 / 7) / 2)
    empty = study.confusion(np.zeros(3, bool), np.zeros(3, bool))
    assert empty.precision is None and empty.recall is None and empty.balanced_accuracy is None
    assert empty.accuracy == 1.0


def test_overlap_and_rules():
    offsets = np.array([[0, 2], [2, 5], [5, 6], [6, 9]])
    assert study.overlap_mask(offsets, [[3, 6]]).tolist() == [False, True, True, False]
    lsd = np.array([3.0, 3.0, 0.1, np.nan])
    lcl = np.array([-0.5, -4.0, -0.1, -0.1])
    rules = study.classifiers(lsd, lcl, alpha=2.0, beta=-2.0)
    assert rules["LSD"].tolist() == [True, True, False, False]
    assert rules["LCL"].tolist() == [True, False, True, True]
    assert rules["LSD and LCL"].tolist() == [True, False, False, False]


def test_identification_rows():
    tokens = study.QATokens(
        doc_id=np.array(["a"] * 4),
        lsd=np.array([3.0, 1.5, 0.0, 2.5]),
        lcl=np.array([-0.1, -0.2, -0.1, -3.0]),
        short=np.array([-3.1, -1.7, -0.1, -5.5]),
        answer=np.array([True, True, False, False]),
        response=np.array([True, True, True, False]),
    )
    rows = study.identification(tokens, [(2.0, -2.0), (1.0, -2.0)])
    got = {(r["scope"], r["threshold"]): (r["tp"], r["fp"], r["fn"], r["tn"]) for r in rows}
    assert got[("qa", "LSD > 2")] == (1, 1, 1, 1)
    assert got[("qa", "LSD > 2 and LCL > -2")] == (1, 0, 1, 2)
    assert got[("qa", "LSD > 1 and LCL > -2")] == (2, 0, 0, 2)
    assert got[("responses", "LSD > 2")] == (1, 0, 1, 1)
    assert ("qa", "LCL > -2") in got and len([k for k in got if k == ("qa", "LCL > -2")]) == 1


# ----------------------------------------------------------------------------------------------
# Top-1 predictions in stage 2's windows


@pytest.fixture(scope="module")
def tiny_scorer(tokenizer):
    model = build_model("llama", len(tokenizer), max_positions=512)
    return TargetScorer(model, head_chunk=5, vocab_tile=64)


@pytest.mark.parametrize("window", [None, 8, 9, 64])
def test_top1_matches_a_forward_pass_on_each_window(tiny_scorer, window):
    model = tiny_scorer.model
    seq = torch.tensor([0, *((np.arange(40) * 37 + 11) % 300 + 2).tolist()])
    positions = np.array([1, 5, 7, 8, 9, 17, 30, 39, 40])
    lp, hits = context_limited_top1(tiny_scorer, seq, positions, window, bos_id=0)
    reference = context_limited_logprobs(tiny_scorer, seq, window, bos_id=0)
    np.testing.assert_allclose(lp, reference[positions], atol=1e-9)
    d = None if window is None else window // 2
    for k, i in enumerate(positions):
        if window is None or len(seq) <= window or i < window:
            context = seq[:i]
        else:  # the window that scores i: starts at a multiple of d, i in its second half
            start = ((i - (window - d)) // d) * d
            context = torch.cat([torch.tensor([0]), seq[start:i]])
        with torch.inference_mode():
            logits = model(input_ids=context[None]).logits[0, -1]
        assert hits[k] == (int(logits.argmax()) == int(seq[i]))
        assert lp[k] == pytest.approx(float(torch.log_softmax(logits, -1)[seq[i]]), abs=1e-9)


def test_top1_counts_hits():
    scorer = SimpleNamespace(
        head=torch.nn.Linear(2, 5, bias=False),
        vocab_tile=2,
        vocab_size=5,
        head_chunk=2,
        post=lambda x: x,
        linear=True,
        head_dtype=torch.float32,
    )
    with torch.no_grad():
        scorer.head.weight.copy_(torch.tensor([[1.0, 0], [0, 1], [2, 0], [0, 2], [-1, -1]]))
    from pipeline.logprobs import TargetScorer, top1_hits

    scorer.logit_tiles = functools.partial(TargetScorer.logit_tiles, scorer)  # the real tiling, on this head
    scorer.head_ready = functools.partial(TargetScorer.head_ready, scorer)
    hidden = torch.tensor([[1.0, 0], [0, 1], [-1, -1]])
    assert top1_hits(scorer, hidden, torch.tensor([2, 1, 4])).tolist() == [True, False, True]


def test_retrieval_on_a_tiny_model(tiny_scorer, tokenizer):
    docs = synthetic.make_corpus(0, 1, n_lines=6, n_questions=2, min_gap_lines=2)
    lm = SimpleNamespace(tokenizer=tokenizer, bos_token_id=0)
    got = study.retrieval(lm, tiny_scorer, docs, window=32)
    assert got["n_answers"] == 2
    assert got["n_answer_tokens"] >= 2
    assert 0.0 <= got["token_accuracy"] <= 1.0 and got["answer_ppl"] > 1.0
    assert study.retrieval(lm, tiny_scorer, docs, window=32) == got


# ----------------------------------------------------------------------------------------------
# The report


def test_report_renders_with_missing_correlations():
    row = {"token_accuracy": 0.5, "answer_exact_match": 0.25, "answer_ppl": 3.0, "other_ppl": 1.5}
    family = [
        {**row, "label": label, "window": w, "ppl": 10.0, "longppl": 20.0, "longppl_soft": 12.0}
        for label, w in (("W=128", 128), ("full", None))
    ]
    truth = np.array([True, False])
    ident = [
        {"scope": scope, "threshold": t, "rule": t, **study.confusion(np.ones(2, bool), truth).to_dict()}
        for scope in ("qa", "responses")
        for t in ("LSD > 2", "LCL > -2", "LSD > 2 and LCL > -2")
    ]
    results = {
        "settings": {"seed": 0, "documents": 1, "lines": 10, "questions": 2, "min_gap_lines": 2,
                     "evaluator": "e", "K": 4, "d": 4, "alpha": 2.0, "beta": -2.0, "gamma": 5.0,
                     "model": "m"},
        "synthetic": {"evaluator_tokens": 100, "qa_tokens": 20, "answer_tokens": 5, "artifact": "a",
                      "artifact_fingerprint": "0" * 64},
        "identification": ident,
        "evaluator_retrieval": {"full": row, "short": row},
        "govreport": {"artifact": "g", "documents": ["g-0"]},
        "family": family,
        "correlations": study.correlations(family),
    }  # fmt: skip
    timing = {"stage 1": 1.0, "total": 2.0}
    text = report.render(results, timing, Path("docs/validation"), "v.html", [(2.0, -2.0)])
    assert "| full | 50.0% | 25.0% |" in text
    assert "n/a" in text  # two variants: no correlation
    assert "![metrics against retrieval accuracy](validation/family.png)" in text  # relative to docs/
