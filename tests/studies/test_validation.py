"""`make validate`'s parts on small inputs: the synthetic documents, the classification metrics, the
top-1 predictions in stage 2's windows, retrieval accuracy and the report."""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import stats as scipy_stats

from pipeline.models.logprobs import TargetScorer, context_limited_logprobs
from pipeline.models.top1 import context_limited_top1
from pipeline.text.corpus import CorpusSpec, load_corpus
from studies.validation import figures, report, study, synthetic
from tests.support import ROOT, build_model

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
        float32_output=True,
    )
    with torch.no_grad():
        scorer.head.weight.copy_(torch.tensor([[1.0, 0], [0, 1], [2, 0], [0, 2], [-1, -1]]))
    from pipeline.models.logprobs import TargetScorer
    from pipeline.models.top1 import top1_hits

    scorer.logit_tiles = functools.partial(TargetScorer.logit_tiles, scorer)  # the real tiling, on this head
    scorer.head_ready = functools.partial(TargetScorer.head_ready, scorer)
    scorer.uses_float32_output = functools.partial(TargetScorer.uses_float32_output, scorer)
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


def family_row(label: str, model: str, accuracy: float, ppl: float, longppl: dict, own: str | None = None):
    """A made-up family member: ``longppl`` by evaluator; ``own``: the evaluator it self-evaluates with."""
    retrieval = {"token_accuracy": accuracy, "answer_exact_match": accuracy / 2, "answer_ppl": 3.0,
                 "other_ppl": 1.5, "n_answer_tokens": 10, "n_answers": 2}  # fmt: skip
    return {
        "label": label, "model": model, "context_limit": None, "checkpoint": False, **retrieval,
        "ppl": ppl, "bpb": ppl / 10, "n_tokens": 100, "n_bytes": 400, "n_truncated": 0,
        "evaluators": {
            e: {"self_evaluation": e == own, "longppl": v, "longppl_soft": 2 * ppl, "key_bpb": v / 10,
                "n_key_tokens": 7, "n_key_bytes": 20, "key_char_coverage": 0.9}
            for e, v in longppl.items()
        },
    }  # fmt: skip


def test_correlations_and_ranking_per_evaluator():
    family = [
        family_row("a", "m1", 0.1, 10.0, {"e1": 50.0, "e2": 9.0}, own="e1"),
        family_row("b", "m1", 0.5, 12.0, {"e1": 20.0, "e2": 8.0}, own="e1"),
        family_row("c", "m2", 0.7, 11.0, {"e1": 10.0, "e2": 7.0}),
        family_row("d", "m2", 0.9, 13.0, {"e1": 5.0, "e2": 7.0}),
    ]
    stats = study.correlations(family, ["e1", "e2"])
    accuracy = [0.1, 0.5, 0.7, 0.9]
    for evaluator, values in (("e1", [50.0, 20.0, 10.0, 5.0]), ("e2", [9.0, 8.0, 7.0, 7.0])):
        row = next(r for r in stats[evaluator] if r["metric"] == "longppl")
        assert row["pearson_r"] == pytest.approx(scipy_stats.pearsonr(values, accuracy).statistic)
        assert row["spearman_r"] == pytest.approx(scipy_stats.spearmanr(values, accuracy).statistic)
        assert row["spearman_p"] == pytest.approx(scipy_stats.spearmanr(values, accuracy).pvalue)
        ppl = next(r for r in stats[evaluator] if r["metric"] == "ppl")  # no evaluator: the same in both
        assert ppl["spearman_r"] == pytest.approx(0.8) and not ppl["evaluator_dependent"]
    e1 = study.ranking(stats["e1"])
    assert e1["best"] == ["longppl", "key_bpb"] and e1["best_spearman"] == pytest.approx(-1.0)
    assert e1["longppl_vs_ppl"] == "better" and e1["key_bpb_vs_bpb"] == "better"
    assert study.ranking(stats["e2"])["best"] == ["longppl", "key_bpb"]  # -0.95 with a tie in LongPPL
    flat = family_row("x", "m", 0.5, 1.0, {"e": 1.0})
    undefined = study.ranking(study.correlations([flat, flat, flat], ["e"])["e"])
    assert undefined == {"best": [], "best_spearman": None, "longppl_vs_ppl": None, "key_bpb_vs_bpb": None}


def test_report_renders_two_evaluators_with_self_evaluation(tmp_path):
    family = [
        family_row("m1 W=128", "m1", 0.25, 10.0, {"m1": 50.0, "m2": 9.0}, own="m1"),
        family_row("m2 full", "m2", 0.75, 12.0, {"m1": 20.0, "m2": 8.0}, own="m2"),
    ]
    truth = np.array([True, False])
    ident = [
        {"scope": scope, "threshold": t, "rule": t, **study.confusion(np.ones(2, bool), truth).to_dict()}
        for scope in ("qa", "responses")
        for t in ("LSD > 2", "LCL > -2", "LSD > 2 and LCL > -2")
    ]
    evaluators = [
        {"label": e, "evaluator": e, "artifact": f"a-{e}", "fingerprint": "0" * 64, "built": e == "m2",
         "K": 4, "d": 4, "alpha": 2.0, "beta": -2.0, "gamma": 5.0, "evaluator_tokens": 100, "key_tokens": 9}
        for e in ("m1", "m2")
    ]  # fmt: skip
    stats = study.correlations(family, ["m1", "m2"])
    results = {
        "settings": {"seed": 0, "documents": 1, "lines": 10, "questions": 2, "min_gap_lines": 2,
                     "evaluator": "e", "K": 4, "d": 4, "alpha": 2.0, "beta": -2.0, "gamma": 5.0},
        "synthetic": {"evaluator_tokens": 100, "qa_tokens": 20, "answer_tokens": 5, "artifact": "a",
                      "artifact_fingerprint": "0" * 64},
        "identification": ident,
        "evaluator_retrieval": {"full": family[0], "short": family[0]},
        "govreport": {"artifact": "g", "documents": ["g-0"]},
        "evaluators": evaluators,
        "family": family,
        "correlations": stats,
        "ranking": {e: study.ranking(stats[e]) for e in ("m1", "m2")},
    }  # fmt: skip
    timing = {"stage 1": 1.0, "member m1 W=128": 3.0, "member m1 W=128 GovReport": 0.4, "total": 2.0}
    text = report.render(results, timing, Path("docs/reports/validation"), "v.html", [(2.0, -2.0)])
    assert "| m2 full | `m2` | full | 75.0% | 37.5% |" in text
    assert "| m1 W=128 | **self** | 50.000 |" in text and "| m2 full |  | 20.000 |" in text
    assert "| m2 full | **self** | 8.000 |" in text
    assert "no metric ranks the family: the correlations are undefined" in text  # two members
    assert "n/a" in text and "the family's members: m1 W=128 3 s (GovReport 0 s)" in text
    assert re.search(r"- \*\*Code\*\* commit \S+.*, \d{4}-\d\d-\d\d\.\n", text)  # which code, which day
    assert (
        "![key bits/byte against retrieval accuracy](validation/family-key_bpb.png)" in text
    )  # relative to docs/reports/
    pngs = figures.family_pngs(family, stats, ["m1", "m2"])
    assert set(pngs) == set(study.FAMILY_METRICS) and all(p.startswith(b"\x89PNG") for p in pngs.values())


def test_a_report_names_the_commit_of_its_code_and_the_day(tmp_path):
    """The reports' **Code** line: the commit, marked when pipeline/ or conf/ differ from it; no git, said."""
    from pipeline.provenance import run_stamp

    assert re.fullmatch(r"commit unknown \(not a git checkout\), \d{4}-\d\d-\d\d", run_stamp(tmp_path))
    repo = tmp_path / "repo"
    (repo / "pipeline").mkdir(parents=True)
    (repo / "pipeline" / "x.py").write_text("a = 1\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "pipeline"], ["commit", "-q", "-m", "x"]):
        subprocess.run([*git, *args], check=True)
    head = subprocess.run(
        [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert re.fullmatch(rf"commit {head}, \d{{4}}-\d\d-\d\d", run_stamp(repo))
    (repo / "pipeline" / "x.py").write_text("a = 2\n")
    assert run_stamp(repo).startswith(f"commit {head} with uncommitted changes, ")


def run_lines_masked(page: str) -> str:
    """A report without what belongs to one run: its wall time, machine, code, minutes and whether it
    equals the run before it."""
    page = re.sub(r"^- \*\*Wall time\*\*.*?^- \*\*Code\*\*[^\n]*\n", "", page, flags=re.M | re.S)
    page = re.sub(r"^- \*\*Determinism\*\*[^\n]*\n", "", page, flags=re.M)
    return re.sub(r"^(make validate +# )\d+ minutes.*$", r"\1N minutes", page, flags=re.M)


def test_the_committed_reports_are_their_results_rendered():
    """docs/reports/validation.md and longce-demo.md are what their templates make of their
    results.json today (apart from the run's timings, machine and code): a template edited without
    the page, or a page edited by hand, fails here."""
    from omegaconf import OmegaConf

    from pipeline.settings import ScoreSettings, parse
    from studies.longce import longce_report

    folder, page = ROOT / "docs/reports/validation", ROOT / "docs/reports/validation.md"
    grid = list(parse(ScoreSettings, {"grid": OmegaConf.load(ROOT / "conf/validate.yaml").grid}).grid)
    (view,) = [p.name for p in folder.glob("keytokens-*.html")]
    results = json.loads((folder / "results.json").read_text())
    text = report.render(results, {"total": 1.0}, folder, view, grid, True, page)
    assert run_lines_masked(text) == run_lines_masked(page.read_text(encoding="utf-8"))
    folder, page = ROOT / "docs/reports/longce-demo", ROOT / "docs/reports/longce-demo.md"
    timing = {"total": {"wall": 1.0, "cpu": 1.0}}
    text = longce_report.render(json.loads((folder / "results.json").read_text()), timing, folder, page)
    assert run_lines_masked(text) == run_lines_masked(page.read_text(encoding="utf-8"))
