"""The answer gain of LooGLE questions (``pipeline.loogle.evidence.answer_gain``) and `make validate`'s LooGLE
target (``studies.validation.loogle_target``): log-likelihoods equal to a direct float64 computation,
questions counted only with their located evidence inside the kept context, exclusions counted with
their reasons, the power of n members, and the report's section."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from pipeline.artifact.qa import ArtifactQuestion, Evidence
from pipeline.errors import PipelineError
from pipeline.loogle.data.prompts import build_prompt
from pipeline.loogle.evidence import answer_gain
from pipeline.loogle.generation.decoding import tokenize_prompt
from pipeline.models.logprobs import TargetScorer
from studies.validation import loogle_report, loogle_target
from studies.validation.options import LoogleTargetOptions
from tests.support import build_model

FILLER = "The committee met in the old hall and talked about the roads, the school and the harvest. "
FIRST = "Gamma Mill was built in 1850 by the river."
MIDDLE = "The mill burned in 1901 and was rebuilt in stone."
LAST = "In 2010 the mill became a library for the town."
TEXT = f"{FIRST} {FILLER * 2}{MIDDLE} {FILLER * 3}{LAST}"


@pytest.fixture(scope="module")
def scorer(tokenizer) -> TargetScorer:
    model = build_model("llama", len(tokenizer), max_positions=512).to(torch.float64)
    scorer = TargetScorer(model, head_chunk=7, vocab_tile=64)
    # As every stage does before its first real pass: on torch 2.13.0 (CPU, float64) the first sdpa
    # call of a process was seen to differ from every later one by about 4e-5 relative in 3 of 8 runs.
    scorer.check_against_full_forward()
    return scorer


def question(*evidence: str | None, answer: str = "a library", kind: str = "computation") -> ArtifactQuestion:
    """A question about TEXT whose evidence strings are located where they occur (None: unlocated)."""
    found = tuple(
        Evidence("?", "unlocated", (), 0, None)
        if e is None
        else Evidence(e, "exact", ((TEXT.index(e), TEXT.index(e) + len(e)),), 1, None)
        for e in evidence
    )
    return ArtifactQuestion(
        "doc", 0, "longdep_qa", "longdep_qa/q", kind, "What is the mill now?", answer, found
    )


def direct_logprob(model, prompt: list[int], answer: list[int]) -> float:
    """log P(answer | prompt) by one plain forward pass of the whole sequence (float64)."""
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([prompt + answer])).logits[0].double(), dim=-1)
    return sum(float(logprobs[len(prompt) - 1 + i, t]) for i, t in enumerate(answer))


def test_the_answer_log_likelihood_is_a_direct_computation(scorer, tokenizer):
    prompt, _ = tokenize_prompt(tokenizer, build_prompt("longdep_qa", "What is the mill now?", TEXT))
    answer = tokenizer("a library", add_special_tokens=False)["input_ids"]
    direct = direct_logprob(scorer.model, prompt, answer)
    assert answer_gain.answer_logprob(scorer, prompt, answer) == pytest.approx(direct, abs=1e-10)


def test_one_questions_gain_is_a_direct_forward_pass_of_the_answer_as_it_follows_the_prompt(
    scorer, tokenizer
):
    """The prompt without its trailing space, then " " + answer, only the answer's tokens counted: the
    tokens the tokenizer makes of the joined text "...Answer: a library"; each term one plain forward
    pass (float64), the document's prefix shared with another question's or not."""
    text = build_prompt("longdep_qa", "What is the mill now?", TEXT).text
    assert text.endswith("Answer: ")
    prompt = tokenizer(text[:-1])["input_ids"]
    answer = tokenizer(" a library", add_special_tokens=False)["input_ids"]
    assert tokenizer(text + "a library")["input_ids"] == prompt + answer  # the join a model reads
    alone = tokenizer(build_prompt("longdep_qa", "What is the mill now?", "").text[:-1])["input_ids"]
    other = replace(question(LAST), question_index=1, source_id="longdep_qa/other", question="When?")
    for group in ([question(MIDDLE)], [question(MIDDLE), other]):
        gain = answer_gain.answer_gains(tokenizer, scorer, group, {"doc": TEXT}, [500])[0]
        assert gain.with_document == pytest.approx(direct_logprob(scorer.model, prompt, answer), abs=1e-9)
        assert gain.question_only == pytest.approx(direct_logprob(scorer.model, alone, answer), abs=1e-9)
        assert (gain.answer_tokens, gain.answer_bytes) == (len(answer), len(b" a library"))
    # the join before (kept to measure what the change moves): the prompt as written, the answer alone
    (apart,) = answer_gain.answer_gains(
        tokenizer, scorer, [question(MIDDLE)], {"doc": TEXT}, [500], join="apart"
    )
    alone_answer = tokenizer("a library", add_special_tokens=False)["input_ids"]
    assert apart.with_document == pytest.approx(
        direct_logprob(scorer.model, tokenizer(text)["input_ids"], alone_answer), abs=1e-9
    )
    assert apart.answer_bytes == len(b"a library")


def test_a_question_counts_only_with_its_evidence_inside_the_kept_context(scorer, tokenizer):
    texts = {"doc": TEXT}
    asked = [question(MIDDLE), question(FIRST, LAST, None), question(None)]
    # count=all (the default): a question with an unlocated evidence string does not count
    _, partly, _ = answer_gain.answer_gains(tokenizer, scorer, asked, texts, [500])
    assert partly.excluded == answer_gain.NOT_ALL_LOCATED and partly.unlocated == 1
    gains = answer_gain.answer_gains(tokenizer, scorer, asked, texts, [500, 200, 40], count="some")
    whole, ends, none = gains[:3]
    assert (whole.excluded, ends.excluded, none.excluded) == (None, None, answer_gain.NO_EVIDENCE)
    assert ends.unlocated == 1 and whole.prompt_tokens == len(
        tokenizer(build_prompt("longdep_qa", "What is the mill now?", TEXT).text[:-1])["input_ids"]
    )  # the prompt without its trailing space
    assert whole.nats == whole.with_document - whole.question_only
    assert whole.bits_per_byte == pytest.approx(whole.nats / math.log(2) / len(b" a library"))
    middle, first_last = gains[3:5]  # cut to 200 tokens: the first and last halves keep both ends only
    assert middle.excluded == answer_gain.OUTSIDE and first_last.excluded is None
    assert first_last.question_only == ends.question_only  # one computation per question
    assert first_last.prompt_tokens == 2 * ((200 - whole.answer_tokens) // 2)
    assert all(g.excluded == answer_gain.NO_ROOM for g in gains[6:8])  # 40 tokens: not even the question
    (row,) = [r for r in answer_gain.summary(gains) if r["limit"] == 200 and r["type"] == "all"]
    assert (row["n_questions"], row["n_counted"], row["n_no_evidence"], row["n_outside"]) == (3, 1, 1, 1)
    assert row["gain_nats"] == first_last.nats and row["counted_unlocated_evidence"] == 1


def test_evidence_past_the_artifacts_text_is_outside(scorer, tokenizer):
    kept = TEXT[: TEXT.index(LAST)]  # the artifact kept the text up to the last sentence
    (gain,) = answer_gain.answer_gains(tokenizer, scorer, [question(LAST)], {"doc": kept}, [500])
    assert gain.excluded == answer_gain.OUTSIDE and gain.to_dict()["gain_nats"] is None


def test_an_empty_answer_is_an_error(scorer, tokenizer):
    with pytest.raises(PipelineError, match="its answer is empty"):
        answer_gain.answer_gains(tokenizer, scorer, [question(FIRST, answer="")], {"doc": TEXT}, [500])


def test_power_of_n_members():
    assert loogle_target.critical_r(8) == pytest.approx(0.7067, abs=1e-4)  # the textbook table's 0.707
    assert loogle_target.critical_r(2) is None


def target_row(
    label: str, model: str, gains: list[float], ppl: float, longppl: float, own: bool = False,
    documents: list[str] | None = None,
) -> dict:  # fmt: skip
    """A member's row with one counted question per gain (q0, q1, ...), each of its own document unless
    ``documents`` names each question's."""
    counts = {"n_counted": len(gains), "n_questions": 8}
    mean = sum(gains) / len(gains) if gains else None
    part = {"gain_bits_per_byte": mean, "gain_bits_per_byte_se": 0.01, "gain_nats": mean, **counts,
            "n_no_evidence": 1, "n_not_all_located": 0, "n_outside": 7 - len(gains), "n_no_room": 0,
            "positive": len(gains), "ppl": ppl, "longppl": longppl, "longppl_soft": longppl,
            "n_key_tokens": 5, "n_truncated": 0, "self_evaluation": own, "limit": 64,
            "by_type": [{"type": "computation", "gain_bits_per_byte": mean, **counts}],
            "questions": [{"source_id": f"q{i}", "doc_id": documents[i] if documents else f"d{i}",
                           "excluded": None, "gain_bits_per_byte": g}
                          for i, g in enumerate(gains)]}  # fmt: skip
    return {"label": label, "model": model, "loogle": part}


def test_members_count_with_five_questions_and_the_evaluator_stands_apart():
    """Three members of one model and two of another count; the evaluator's apart; one member with 4
    questions does not count; LongPPL orders the members perfectly, PPL not at all."""
    base = [0.5, 0.1, 0.3, 0.2, 0.4, 0.6]
    rows = [target_row("a W=1", "a", [g + 0.0 for g in base], 10.0, 30.0),
            target_row("a W=2", "a", [g + 0.1 for g in base], 12.0, 20.0),
            target_row("a W=3", "a", [g + 0.2 for g in base], 11.0, 10.0),
            target_row("b W=1", "b", [g + 0.3 for g in base], 9.0, 5.0),
            target_row("b W=2", "b", [g + 0.4 for g in base[:4]], 8.0, 1.0),
            target_row("e full", "e", base, 7.0, 2.0, own=True)]  # fmt: skip
    o = LoogleTargetOptions(resamples=200)
    stats = loogle_target.correlations(rows, o)
    assert [m["counts"] for m in stats["members"]] == [True, True, True, True, False, True]
    across = stats["across"]["own"]
    assert across["labels"] == ["a W=1", "a W=2", "a W=3", "b W=1"]  # the evaluator's member apart
    by = {r["metric"]: r for r in across["rows"]}
    assert by["longppl"]["spearman_r"] == pytest.approx(-1.0) and by["ppl"]["spearman_r"] == pytest.approx(
        -0.4
    )
    # every question moves each member alike: every resample ranks the members as observed
    assert by["longppl"]["bootstrap_interval"] == [pytest.approx(-1.0), pytest.approx(-1.0)]
    assert by["longppl"]["bootstrap_p"] == 0.0 and across["verdict"] == "better"
    assert stats["across"]["common"]["questions"] == 6 and stats["evaluator"]["own"]["labels"] == ["e full"]
    within = stats["within"]["a"]["own"]
    assert within["labels"] == ["a W=1", "a W=2", "a W=3"] and within["verdict"] == "better"
    assert stats["within"]["b"]["own"]["rows"][0]["note"] == "fewer than 3 models with values"
    results = {"family": rows, "loogle": {"correlations": stats}}
    context = loogle_report.context(results)
    assert "| e full (evaluator) | 64 | 6 / 8 | yes | 1 / 0 / 1 / 0 |" in context["tables"]["members"]
    assert "| b W=2 | 64 | 4 / 8 | no |" in context["tables"]["members"]
    assert context["not_counting"] == ["b W=2 (4)"]
    group = "the members but the evaluator's, each its own questions"
    assert f"| {group} | a W=1, a W=2, a W=3, b W=1 | 6 | LongPPL | -1.000 |" in context["tables"]["groups"]


def test_shared_questions_widen_the_bootstrap_interval():
    """Members whose means rest on a few shared questions that disagree: the bootstrap interval of rho
    spans 0, so the verdict stays undetermined, whatever scipy's p says."""
    rows = [target_row(f"m{i}", "m", [g * (1 + 0.1 * i) - 0.05 * i for g in (1.0, -1.0, 0.5, -0.5, 0.2)],
                       float(i), float(-i)) for i in range(4)]  # fmt: skip
    stats = loogle_target.correlations(rows, LoogleTargetOptions(resamples=300))
    longppl = {r["metric"]: r for r in stats["across"]["own"]["rows"]}["longppl"]
    low, high = longppl["bootstrap_interval"]
    assert longppl["spearman_r"] == pytest.approx(1.0) and longppl["spearman_p"] < 0.05  # as if independent
    assert low < 0 < high and longppl["bootstrap_p"] > 0.05
    assert stats["across"]["own"]["verdict"] == "undetermined"


def test_the_bootstrap_resamples_documents_with_all_their_questions():
    """Ten questions of document A order four members one way, ten of document B slightly the other
    way: resampled as questions, almost every replicate keeps A's order (interval [+1, +1]); resampled
    as documents, a quarter of them hold B alone, and the interval reaches -1. The questions of one
    document share its text, so the question bootstrap overstated the evidence."""
    documents = ["A"] * 10 + ["B"] * 10
    gains = [[0.1 * i] * 10 + [-0.01 * i] * 10 for i in range(4)]
    rows = [target_row(f"m{i}", "m", g, float(i), float(i), documents=documents) for i, g in enumerate(gains)]
    stats = loogle_target.correlations(rows, LoogleTargetOptions(resamples=400))
    own = stats["across"]["own"]
    longppl = {r["metric"]: r for r in own["rows"]}["longppl"]
    assert own["documents"] == 2 and longppl["spearman_r"] == pytest.approx(1.0)
    assert longppl["bootstrap_interval"][0] == pytest.approx(-1.0)  # the question bootstrap: +1.0
    assert stats["bootstrap"]["resampled"] == "documents"


def test_the_statistics_of_a_recorded_file_are_recomputed(tmp_path, monkeypatch, capsys):
    """python -m studies.validation.loogle_stats --results <file>: the statistics of a results file
    (the study's, or a LooGLE part's raw JSON) recomputed with the document bootstrap."""
    import json
    import sys

    from studies.validation import loogle_stats

    documents = ["A"] * 3 + ["B"] * 3
    rows = [target_row(f"m{i}", "m", [0.1 * i + 0.01 * j for j in range(6)], float(i), float(-i),
                       documents=documents) for i in range(3)]  # fmt: skip
    part = {"members": [{**r, "loogle": {k: v for k, v in r["loogle"].items() if k != "questions"}}
                        for r in rows], "questions": {r["label"]: r["loogle"]["questions"] for r in rows},
            "min_questions": 5, "resamples": 50, "seed": 0}  # fmt: skip
    (tmp_path / "part.json").write_text(json.dumps(part))
    out = tmp_path / "stats.json"
    monkeypatch.setattr(
        sys, "argv", ["loogle_stats", "--results", str(tmp_path / "part.json"), "--json", str(out)]
    )
    loogle_stats.main()
    printed = capsys.readouterr().out
    assert "across, own: m0, m1, m2 (6 questions of 2 documents)" in printed
    assert json.loads(out.read_text())["within"]["m"]["own"]["documents"] == 2


def test_an_artifact_without_questions_is_one_error(tiny_artifact, tmp_path):
    v = SimpleNamespace(options=SimpleNamespace(loogle=LoogleTargetOptions(artifact=str(tiny_artifact))))
    with pytest.raises(PipelineError, match="has no questions: give an artifact of corpus=loogle_sample"):
        loogle_target.target(v, tmp_path)
    v.options.loogle = LoogleTargetOptions(enabled=False)
    assert loogle_target.target(v, tmp_path) is None


def test_the_target_reads_an_artifacts_questions(loogle_artifact, tmp_path):
    options = LoogleTargetOptions(artifact=str(loogle_artifact), tasks=["longdep_qa"])
    t = loogle_target.target(SimpleNamespace(options=SimpleNamespace(loogle=options)), tmp_path)
    assert [q.task for q in t.questions] == [
        "longdep_qa"
    ] * 3  # the shortdep_qa question left out and set(t.texts) == {q.doc_id for q in t.questions}
    record = loogle_target.record(t, options)
    assert record["questions"] == 3 and record["types"] == [
        "comprehension_and_reasoning",
        "computation",
        "timeline_reorder",
    ]
    with pytest.raises(PipelineError, match="no question of the tasks shortdep_cloze"):
        options = LoogleTargetOptions(artifact=str(loogle_artifact), tasks=["shortdep_cloze"])
        loogle_target.target(SimpleNamespace(options=SimpleNamespace(loogle=options)), Path(tmp_path))


def test_the_api_gives_each_questions_gain_on_a_model_in_memory(whole_loogle_artifact, tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipeline import api

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float64)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    gains = api.answer_gains(model, tokenizer, whole_loogle_artifact, [512, 64])
    assert [g.limit for g in gains] == [512] * 3 + [64] * 3
    no_room, no_evidence = answer_gain.NO_ROOM, answer_gain.NO_EVIDENCE
    assert [g.excluded for g in gains] == [None, no_evidence, None, no_room, no_evidence, no_room]
    first = gains[0]
    scorer = TargetScorer(model)
    assert first.question_only == answer_gain.answer_logprob(
        scorer,
        tokenizer(build_prompt("longdep_qa", "What came after the fire?", "").text[:-1])["input_ids"],
        tokenizer(first_answer := " a museum", add_special_tokens=False)["input_ids"],
    )
    assert first.answer_bytes == len(first_answer)
    with pytest.raises(PipelineError, match="unknown setting 'K'"):
        api.answer_gains(model, tokenizer, whole_loogle_artifact, [512], K=4)


def test_a_document_longer_than_a_whole_context_member_is_scored_truncated(whole_loogle_artifact, tokenizer):
    from pipeline.models.loading import in_memory
    from pipeline.settings import Compute

    lm = in_memory(build_model("llama", len(tokenizer), max_positions=256).to(torch.float64), tokenizer)
    options = LoogleTargetOptions(artifact=str(whole_loogle_artifact))
    t = loogle_target.target(SimpleNamespace(options=SimpleNamespace(loogle=options)), Path("unused"))
    member = SimpleNamespace(label="short", context_limit=None, choice=SimpleNamespace(spec="short"))
    part = loogle_target.member_part(Compute(dtype="float64"), member, lm, lm_scorer(lm), t)
    assert part["limit"] == 256 and part["n_truncated"] == 2  # texts of 386 and 288 tokens
    assert part["n_questions"] == 3 and part["ppl"] > 1


def lm_scorer(lm) -> TargetScorer:
    return TargetScorer(lm.model, head_chunk=16, vocab_tile=64)
