"""LooGLE's metrics equal its own evaluation code's numbers (tests/fixtures/loogle/reference.json, which
says how they were computed) on the repository's Output/ files and on a synthetic cloze file; the
departures (METEOR's order, BERTScore offline, cloze answers never run, the timeline metrics) behave as
documented."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.errors import PipelineError
from pipeline.loogle.data.reading import DataSource
from pipeline.loogle.generation.predictions import Scored, official_pairs, read_lines
from pipeline.loogle.metrics import reorder
from pipeline.loogle.metrics import similarity as metrics
from pipeline.loogle.metrics.evaluation import evaluate
from pipeline.loogle.metrics.task_scores import score_task
from pipeline.reporting import loogle as loogle_board
from pipeline.results import loogle as loogle_results
from tests.support import ROOT, compose_config

FIXTURES = ROOT / "tests" / "fixtures" / "loogle"
REFERENCE = json.loads((FIXTURES / "reference.json").read_text())
OFFICIAL = (
    ROOT.parent / "shared" / "data" / "loogle" / "official-output"
)  # LooGLE's Output/, beside the clone


@pytest.mark.skipif(
    not OFFICIAL.is_dir(), reason="LooGLE's Output/ files are not beside the clone (../shared)"
)
@pytest.mark.parametrize("name", sorted(REFERENCE["official_output"]))
def test_official_outputs_score_as_loogles_code_does(name):
    expected = REFERENCE["official_output"][name]
    result = evaluate(OFFICIAL / name, expected["task"], DataSource(), "auto")
    assert result["n_questions"] == expected["n_questions"]
    for metric, value in expected["metrics"].items():
        assert result["metrics"][metric] == pytest.approx(value, abs=1e-9, rel=0), metric
    # roberta-large is not in this machine's Hub cache: BERTScore alone is null, with its reason
    assert result["metrics"]["bertscore"] is None
    assert "roberta-large" in result["unavailable"]["bertscore"]


@pytest.mark.skipif(
    not OFFICIAL.is_dir(), reason="LooGLE's Output/ files are not beside the clone (../shared)"
)
def test_make_loogle_metrics_records_the_numbers_at_full_precision(tmp_path):
    """The results line holds LooGLE's own code's numbers to 1e-12 (checkable without the library);
    the printed table keeps 4 decimals; make leaderboard shows the line."""
    from pipeline.commands.loogle_metrics import run

    name = "shortdep_qa_llama-index.jsonl"
    expected = REFERENCE["official_output"][name]
    results = tmp_path / "results" / "loogle.jsonl"
    cfg = compose_config(
        "loogle_metrics", [f"predictions={OFFICIAL / name}", "task=shortdep_qa", f"results={results}"]
    )
    run(cfg)
    (line,) = loogle_results.read_rows(results)
    for metric, value in expected["metrics"].items():
        assert line["metrics"][metric] == pytest.approx(value, abs=1e-12, rel=0), metric
    assert (line["measured_by"], line["model_name"], line["task"]) == (
        "make loogle-metrics", "shortdep_qa_llama-index", "shortdep_qa",
    )  # fmt: skip
    assert line["cpu_seconds"] >= 0 and line["fingerprint"] == line["settings"]["fingerprint"]
    board = loogle_board.files(results)["loogle.md"].decode()
    assert f"| shortdep_qa_llama-index | shortdep_qa | LooGLE Output/ | {expected['n_questions']} |" in board
    assert f"| {expected['metrics']['bleu1']:.4f} |" in board  # 4 decimals where people read it
    run(cfg)  # the same file again: the same entry, the newest line shown
    assert len(loogle_results.read_rows(results)) == 2 and len(loogle_board.table(results)) == 1


def test_cloze_matches_as_loogles_code_counts_them(tmp_path):
    marker = tmp_path / "ran"
    rows = read_lines(FIXTURES / "shortdep_cloze_synthetic.jsonl")
    code = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    rows[1]["llm_output"][-1] = code  # a prediction that is code: a wrong answer, never run
    pairs = official_pairs(rows, "shortdep_cloze", "synthetic")
    result = score_task("shortdep_cloze", pairs)
    cloze = REFERENCE["cloze"]
    assert result["metrics"]["exact_match"] == pytest.approx(cloze["exact_match"], abs=1e-12)
    assert result["metrics"]["partial_match"] == pytest.approx(cloze["partial_match"], abs=1e-12)
    per_question = [metrics.partial_match(p.answer, p.prediction) for p in pairs]
    assert [list(c) for c in per_question] == cloze["per_question"]["partial_match"]
    assert not marker.exists()


def test_meteor_is_the_same_whatever_the_order_of_repeated_words():
    # LooGLE's sets iterate in hash order; here tokens keep their first-occurrence order
    assert metrics.ordered_set(["b", "a", "b", "c", "a"]) == ["b", "a", "c"]
    reference, hypothesis = "the cat sat on the mat", "the cat sat on a mat the"
    assert metrics.meteor(reference, hypothesis) == metrics.meteor(reference, hypothesis)
    assert 0 < metrics.meteor(reference, hypothesis) <= 1


def test_bertscore_is_called_as_loogle_calls_it():
    """bert-score's score(cands, refs) with the answer as the candidate: element 1 (its recall) is over
    the prediction's tokens."""
    calls = []

    class Scorer:
        def score(self, cands, refs):
            calls.append((cands, refs))
            return (0.1, 0.7, 0.3)

    assert metrics.bertscores(["the answer"], [""], Scorer()) == [0.7]
    assert calls == [(["the answer"], ["None"])]  # an empty prediction is scored as "None"


def test_rouge_of_a_prediction_without_words_is_zero():
    assert metrics.rouge_recall("Paris is the capital.", "...") == (0.0, 0.0, 0.0)
    assert metrics.similarity("Paris", "")["bleu1"] == 0.0  # "" is scored as "None", as LooGLE does


def test_timeline_deviations():
    same, ok = reorder.question_deviations("II,I,III", "II. first\nI. then\nIII. last")
    assert ok and same == {"location_square": 0.0, "location_mean": 0.0, "swap": 0.0, "swap_distance": 0.0}
    swapped, ok = reorder.question_deviations("2,1,3", "1, then 2, then 3")
    assert ok and swapped == {
        "location_square": pytest.approx(2 / 3),
        "location_mean": pytest.approx(2 / 3),
        "swap": 1.0,
        "swap_distance": 1.0,
    }
    missing, ok = reorder.question_deviations("I,II,III", "I. and III.")
    assert not ok and missing == reorder.largest(3)
    assert reorder.largest(3) == {
        "location_square": 8 / 3,
        "location_mean": 4 / 3,
        "swap": 2.0,
        "swap_distance": 2.0,
    }
    scores = reorder.reorder_scores([Scored("II I III", "II,I,III"), Scored("x", "Eixample.")])
    assert scores["n_questions"] == 1 and scores["n_ordered"] == 1


def test_text_tasks_refuse_a_cloze_answer():
    with pytest.raises(PipelineError, match="expected text"):
        score_task("shortdep_qa", [Scored({"<mask-0>": "a"}, "b")])


def test_wordnet_lexnames_from_the_manual_page(tmp_path):
    from pipeline.loogle.metrics.wordnet import LEXICOGRAPHER_FILES, LEXNAMES_PAGE, lexnames, page_names

    if not Path(LEXNAMES_PAGE).is_file():
        pytest.skip(
            "lexnames(5WN) is not installed here (an image without manual pages): the kept list is used"
        )
    assert page_names() == LEXICOGRAPHER_FILES  # the kept list is the documented one
    text = lexnames()
    assert text.splitlines()[0] == "00\tadj.all\t3" and text.splitlines()[-1] == "44\tadj.ppl\t3"
    assert "18\tnoun.person\t1" in text.splitlines() and lexnames(tmp_path / "no-page") == text


def test_bertscore_equals_bert_scores_own_call_with_the_same_model(tmp_path, monkeypatch):
    """LooGLE's call, ``score([reference], [hypothesis], ...)[1]``, and this project's scorer loaded once
    give the same numbers (here with a tiny random RoBERTa in place of roberta-large, which needs the Hub)."""
    import bert_score
    import torch
    from transformers import RobertaConfig, RobertaModel

    from pipeline.loogle.metrics import task_scores as scoring
    from tests.support import build_tokenizer

    tokenizer = build_tokenizer()
    tokenizer.model_max_length, tokenizer.pad_token = 128, tokenizer.eos_token
    shape = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
    config = RobertaConfig(vocab_size=len(tokenizer), max_position_embeddings=130, pad_token_id=1, **shape)
    torch.manual_seed(0)
    RobertaModel(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    pairs = [Scored("Paris is the capital", "The capital of France is Paris."), Scored("", "No.")]
    model = {"model_type": str(tmp_path), "num_layers": 2}
    expected = [float(bert_score.score([p.answer], [p.prediction or "None"], **model)[1]) for p in pairs]
    scorer = bert_score.BERTScorer(**model)
    assert metrics.bertscores([p.answer for p in pairs], [p.prediction for p in pairs], scorer) == expected
    monkeypatch.setattr(scoring, "bert_scorer", lambda mode: (scorer, None))
    result = score_task("shortdep_qa", pairs)
    assert result["metrics"]["bertscore"] == pytest.approx(sum(expected) / 2, abs=1e-12)
    assert "bertscore" not in result["unavailable"]


def official_line(*items: tuple[str, str | None]) -> str:
    """One line of LooGLE's ``Output/`` format for longdep_qa: each (answer, type) a question, every
    prediction the answer itself."""
    questions = [{"Q": f"Question {i}?", "A": a, "S": []} | ({"type": t} if t else {}) for i, (a, t) in
                 enumerate(items)]  # fmt: skip
    answers = [a for a, _ in items]
    return json.dumps({"output": answers, "question": questions, "llm_output": answers}) + "\n"


@pytest.mark.parametrize(
    "items",
    [
        (("II,I,III", "时间线"), ("20,300", "computation"), ("2,1,3", "computation")),  # by type
        (("II,I,III", None), ("20,300", None), ("3,1,4", None), ("1,1", None)),  # untyped: a permutation
    ],
)
def test_a_number_is_never_read_as_a_timeline_order(tmp_path, items):
    """A timeline question is known by its type where the data gives one, otherwise by an answer that
    is a permutation of 1..n or I..n: "20,300" (a computation's answer) is no order of two events."""
    path = tmp_path / "longdep_qa_output.jsonl"
    path.write_text(official_line(*items))
    result = evaluate(path, "longdep_qa", DataSource(), "false")
    assert result["reorder"]["n_questions"] == 1 and result["reorder"]["n_ordered"] == 1
    assert "over 1 timeline questions" in "\n".join(loogle_board.result_lines(result))


def test_a_timeline_question_whose_answer_is_no_order_is_refused(tmp_path):
    path = tmp_path / "longdep_qa_output.jsonl"
    path.write_text(official_line(("II,I,III", "timeline_reorder"), ("a museum", "timeline_reorder")))
    with pytest.raises(PipelineError, match=r"type 'timeline_reorder' has the answer 'a museum'"):
        evaluate(path, "longdep_qa", DataSource(), "false")
    assert reorder.is_reorder("III,I,II,IV", "Timeline reorder")
    assert not reorder.is_reorder("2,1", "computation")
    assert [reorder.roman(n) for n in (4, 9, 14, 40)] == ["IV", "IX", "XIV", "XL"]
