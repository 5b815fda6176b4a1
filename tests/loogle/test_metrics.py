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


def repository_swap_distance(p: list[int]) -> int:
    """LooGLE's ``swap_distance_deviation`` as its ``get_reorder_deviation.py`` runs it: swap the pair
    that most lowers the summed displacement per unit of distance until every event is in place."""
    p, weight = list(p), 0
    while any(v != i for i, v in enumerate(p)):
        best, pair = 0.0, (0, 0)
        for i in range(len(p)):
            for j in range(i + 1, len(p)):
                gain = ((abs(p[i] - i) + abs(p[j] - j)) - (abs(p[j] - i) + abs(p[i] - j))) / (j - i)
                if gain > best:
                    best, pair = gain, (i, j)
        i, j = pair
        p[i], p[j] = p[j], p[i]
        weight += j - i
    return weight


def test_the_closed_forms_are_the_repositorys_enumeration_and_greedy():
    """The swap distance is the repository's greedy on every order of up to 7 events (and 500 random
    orders of up to 30), and each largest deviation its enumeration over the wrong orders."""
    import itertools
    import random

    for n in range(1, 8):
        orders = [list(p) for p in itertools.permutations(range(n))]
        assert all(reorder.swap_distance(p) == repository_swap_distance(p) for p in orders)
        wrong = [reorder.deviations(p) for p in orders if p != list(range(n))]
        expected = {k: max(d[k] for d in wrong) for k in reorder.NAMES} if wrong else reorder.largest(1)
        assert reorder.largest(n) == pytest.approx(expected), n
    rng = random.Random(0)
    for _ in range(500):
        p = list(range(rng.randint(2, 30)))
        rng.shuffle(p)
        assert reorder.swap_distance(p) == repository_swap_distance(p)


def test_a_timeline_of_many_events_is_scored_at_once():
    """A 10-event question passed the load check and failed after the whole generation (the largest
    deviations were enumerated up to 9 events, 45 s for 9): any number of events is scored now."""
    import time

    answer = ",".join(reorder.roman(i) for i in range(1, 11))
    started = time.perf_counter()
    wrong, ok = reorder.question_deviations(answer, "I and II")
    assert not ok and wrong == {
        "location_square": 33.0,
        "location_mean": 5.0,
        "swap": 9.0,
        "swap_distance": 25.0,
    }
    many = ",".join(str(i) for i in range(200, 0, -1))
    reversed_order, ok = reorder.question_deviations(many, " ".join(str(i) for i in range(1, 201)))
    assert ok and reversed_order["swap_distance"] == 200 * 200 // 4 and reversed_order["swap"] == 100
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(
    "kind", ["timeline  reorder", "timeline\u00a0reorder", "Timeline_Reorder ", "timeline-reorder", "时间线"]
)
def test_a_timeline_type_written_another_way_is_a_timeline(kind):
    """Two spaces or a no-break space were silently not a timeline question (no reorder line)."""
    assert reorder.is_reorder("II,I,III", kind)
    reorder.check_timeline("longdep_qa", [Scored("II I III", "II,I,III", "Q?", kind)])
    scores = reorder.reorder_scores([Scored("II I III", "II,I,III", "Q?", kind)])
    assert scores["n_questions"] == 1 and scores["n_ordered"] == 1


def test_make_loogle_metrics_prints_the_reorder_line_of_a_type_written_another_way(tmp_path):
    """The printed summary has its reorder line for a type with two spaces, and says when a task has
    no timeline question at all, instead of leaving the line out."""
    path = tmp_path / "longdep_qa_output.jsonl"
    path.write_text(official_line(("II,I,III", "timeline  reorder"), ("3", "Computation")))
    shown = "\n".join(loogle_board.result_lines(evaluate(path, "longdep_qa", DataSource(), "false")))
    assert "over 1 timeline questions" in shown
    path.write_text(official_line(("3", "computation")))
    shown = "\n".join(loogle_board.result_lines(evaluate(path, "longdep_qa", DataSource(), "false")))
    assert "reorder       none: no timeline question" in shown
    path.write_text(official_line(("II,I,III", "reorder")))
    with pytest.raises(PipelineError, match=r"question 0: type 'reorder' is none of LooGLE's"):
        evaluate(path, "longdep_qa", DataSource(), "false")


@pytest.mark.parametrize("kind", ["", " ", "\u00a0", "\t"])
def test_a_type_of_only_whitespace_is_no_type(kind):
    """An empty type is no type: the question is a timeline one by its answer alone."""
    assert reorder.is_reorder("2,1,3", kind) and not reorder.is_reorder("20,300", kind)
    reorder.check_timeline("longdep_qa", [Scored("1 2 3", "2,1,3", "Q?", kind)])


@pytest.mark.parametrize("kind", ["reorder", "timeline reordering", "other"])
def test_a_type_none_of_loogles_is_refused(kind):
    """A type that is no LooGLE type ("reorder") was silently not a timeline question: one line naming
    the question, the type and the known types."""
    with pytest.raises(PipelineError) as caught:
        reorder.check_timeline("longdep_qa", [Scored("II I III", "II,I,III", "Q?", kind)])
    message = str(caught.value)
    assert f"type {kind!r} is none of LooGLE's question types" in message and "timeline_reorder" in message
    assert "question 0" in message and "\n" not in message
    reorder.check_timeline("shortdep_qa", [Scored("x", "y", "Q?", kind)])  # other tasks have no types
    reorder.check_timeline(
        "longdep_qa", [Scored("x", "y", "Q?", k) for k in ("Computation", "multiple information retrieval",
                                                           "Comprehension & Reasoning", None)]
    )  # fmt: skip


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
