"""LooGLE's evidence located (``pipeline.text.locating``): each rule on small strings, spans that
map back to the original characters exactly, a paraphrase left unlocated, and the located counts of the
embedded sample (and of LooGLE's whole test data where ``../shared/data/loogle`` is present), pinned."""

from __future__ import annotations

import contextlib
import json
import signal

import pytest

from pipeline.commands.loogle_evidence import run
from pipeline.loogle.data.reading import DataSource, load_questions
from pipeline.reporting import loogle_evidence
from pipeline.text.locating import MAX_FUZZY, Document, locate, normalise, sentences
from tests.support import ROOT, compose_config, qa_pairs

SHARED = ROOT.parent / "shared" / "data" / "loogle"
FILLER = "Unrelated words fill the page here. " * 20


def spans_text(text: str, evidence: str) -> tuple[str, list[str]]:
    """The rule that located ``evidence`` in ``text`` and the text of each span."""
    found = locate(evidence, Document(text))
    return found.rule, [text[start:end] for start, end in found.spans]


def test_an_exact_substring_is_exact():
    text = FILLER + "Parador de Arcos de la Frontera opened to guests on 7 November 1966." + FILLER
    rule, spans = spans_text(text, "  opened to guests on 7 November 1966.\n")
    assert (rule, spans) == ("exact", ["opened to guests on 7 November 1966."])


def test_a_question_mark_stands_for_non_ascii_characters():
    text = FILLER + "The Parador at Jaén, and Gülbaşı District's state hospital, were destroyed." + FILLER
    rule, spans = spans_text(text, "Parador at Ja?n, and G?lba?? District's state hospital")
    assert (rule, spans) == ("normalised", ["Parador at Jaén, and Gülbaşı District's state hospital"])
    # a no-break space written as "?" in the evidence, a plain space in the text
    rule, spans = spans_text(
        FILLER + "a conventional firearm, reminiscent of fireworks", "firearm,?\nreminiscent"
    )
    assert (rule, spans) == ("normalised", ["firearm, reminiscent"])


def test_citation_markers_are_ignored_on_either_side():
    text = FILLER + "On qualifying in 1951, Picardo pursued his interest in historical architecture." + FILLER
    rule, spans = spans_text(text, "On qualifying in 1951,[6][7] Picardo pursued his interest")
    assert (rule, spans) == ("normalised", ["On qualifying in 1951, Picardo pursued his interest"])
    text = FILLER + "The assembly was destroyed,[158] as was St. Paul's Church [159] and the mosque." + FILLER
    rule, spans = spans_text(text, "destroyed, as was St. Paul's Church and the mosque")
    assert (rule, spans) == ("normalised", ["destroyed,[158] as was St. Paul's Church [159] and the mosque"])


def test_whitespace_case_and_quotes_are_normalised():
    text = (
        FILLER + 'Reuters voiced that the tone had deteriorated, "reminiscent" of the Yellow Vests.' + FILLER
    )
    rule, spans = spans_text(text, "Reuters Voiced That The Tone Had\nDeteriorated, 'Reminiscent' Of")
    assert (rule, spans) == (
        "normalised",
        ['Reuters voiced that the tone had deteriorated, "reminiscent" of'],
    )


def test_elided_evidence_is_located_piece_by_piece():
    first, second = (
        "At least 300 buildings were razed in Malatya.",
        "The ceiling of Malatya Erhaç Airport collapsed.",
    )
    text = FILLER + first + " Several hundred people were rescued from the rubble. " + second + FILLER
    rule, spans = spans_text(text, f"{first} ......{second.replace('ç', '?')}")
    assert (rule, spans) == ("pieces", [first, second])
    # pieces out of order are not this rule's (the sentences rule's, which takes any order); one too
    # short to place locates nothing
    assert spans_text(text, f"{second} ... {first}") == ("sentences", [second, first])
    assert spans_text(text, f"In Malatya,......{second}")[0] == "unlocated"


def test_a_close_copy_is_located_by_the_fuzzy_rule():
    sentence = (
        "Singapore stated there was no international consensus on the death penalty or what was the "
        "threshold of serious crimes, and every country has the sovereign right to decide on its use."
    )
    evidence = "2." + sentence.replace("stated there", "stated that there").replace("its use", "the use")
    found = locate(evidence, Document(FILLER + sentence + FILLER))
    assert found.rule == "fuzzy" and found.ratio is not None and found.ratio >= 0.9
    ((start, end),) = found.spans
    assert (FILLER + sentence + FILLER)[start:end] == sentence  # not the "2." the annotator added


def test_sentences_that_stand_apart_are_located_one_by_one():
    first = "The port was enlarged with a long breakwater during the fifteenth century."
    second = "Industrialization brought about important changes to the city and its districts."
    text = FILLER + first + FILLER + second + FILLER
    # joined without an ellipsis, glued at a full stop, with a citation marker between
    for evidence in (f"{first} {second}", f"{first[:-1]}.{second}", f"{first}[12] {second}"):
        rule, spans = spans_text(text, evidence)
        assert (rule, spans) == ("sentences", [first, second]), evidence
    # in the evidence's order, whatever the text's; a label the annotator added: the fuzzy rule's
    found = locate(f"(Port) {first} {second}", Document(FILLER + second + FILLER + first + FILLER))
    assert found.rule == "sentences" and found.ratio is not None and found.ratio >= 0.9
    assert found.spans[0][0] > found.spans[1][0]
    # every sentence must be found; a short one joins its neighbour
    assert spans_text(text, f"{first} The committee never met again after that day.")[0] == "unlocated"
    assert sentences("Dr. Smith came. He left at noon on a Monday. Then he returned at six.") == [
        "Dr. Smith came. He left at noon on a Monday.",
        "Then he returned at six.",
    ]


def test_a_paraphrase_stays_unlocated():
    text = (
        FILLER
        + (
            "The committee approved the new budget on Monday after a long debate about the costs of the "
            "program, which several members had criticised as far too high for the city."
        )
        + FILLER
    )
    paraphrase = "After a lengthy discussion of the program's costs, the city's budget was passed on Monday."
    assert locate(paraphrase, Document(text)).rule == "unlocated"
    # a verbatim stretch (an anchor) with the rest rewritten is still too far from the text
    half = (
        "The committee approved the new budget on Monday, although members called the whole thing too dear."
    )
    assert locate(half, Document(text)).rule == "unlocated"


def test_normalised_characters_map_back_to_the_original():
    original = "Jaén  [6]Gülbaşı\u00a0x  [es] “quoted”\n\tEND? é?"
    norm = normalise(original)
    assert norm.text == "ja?ng?lba?x?quoted?end?"
    for i, char in enumerate(norm.text):
        piece = original[norm.starts[i] : norm.ends[i]]
        assert normalise(piece).text == char, (i, piece)
    assert norm.starts == sorted(norm.starts) and all(
        s < e for s, e in zip(norm.starts, norm.ends, strict=True)
    )


def exact_checks(task: str, source: DataSource, report: dict) -> None:
    """Each exactly located span is the evidence itself; every located span lies in its document."""
    questions = {q.qid: q for q in load_questions(task, source)}
    for record in report["evidence"]:
        question = questions[record["qid"]]
        text = question.evidence[record["evidence_index"]]
        if record["rule"] == "exact":
            ((start, end),) = record["spans"]
            assert question.context[start:end] == text.strip()
        assert all(0 <= s < e <= len(question.context) for s, e in record["spans"])


def test_the_sample_evidence_located_counts_are_pinned(tmp_path):
    out = tmp_path / "evidence.json"
    result = run(compose_config("loogle_evidence", [f"out={out}"]))
    assert json.loads(out.read_text()) == result
    by_task = {rep["task"]: rep for rep in result["tasks"]}
    assert by_task["shortdep_qa"]["by_rule"] == {
        "exact": 7,
        "normalised": 3,
        "pieces": 0,
        "fuzzy": 0,
        "sentences": 1,  # Picardo #0: two sentences 190 characters apart (unlocated before that rule)
        "unlocated": 0,
    }
    assert by_task["longdep_qa"]["by_rule"] == {
        "exact": 6,
        "normalised": 19,
        "pieces": 0,
        "fuzzy": 7,
        "sentences": 0,
        "unlocated": 2,
    }
    assert by_task["shortdep_qa"]["fraction_located"] == 11 / 11
    assert by_task["longdep_qa"]["fraction_located"] == 32 / 34
    assert [(m["qid"], m["evidence_index"]) for m in by_task["longdep_qa"]["unlocated"]] == [
        ("José Luis Picardo#4", 1),
        ("Assassination of Shinzo Abe#0", 1),
    ]
    for task, report in by_task.items():
        exact_checks(task, DataSource(), report)


@pytest.mark.skipif(not SHARED.is_dir(), reason="LooGLE's test data is not in ../shared/data/loogle")
def test_the_whole_test_data_located_counts_are_pinned(tmp_path):
    result = run(compose_config("loogle_evidence", [f"data={SHARED}", f"out={tmp_path / 'e.json'}"]))
    counts = {rep["task"]: list(rep["by_rule"].values()) for rep in result["tasks"]}
    assert counts == {  # exact, normalised, pieces, fuzzy, sentences, unlocated
        "shortdep_qa": [61, 13, 0, 3, 1, 2],
        "longdep_qa": [52, 45, 4, 13, 5, 5],
        "shortdep_cloze": [0, 0, 0, 0, 0, 94],  # its "evidence" is a summary of the segment
        "longdep_summarization": [0, 0, 0, 0, 0, 0],
    }
    for report in result["tasks"]:
        exact_checks(report["task"], DataSource(str(SHARED)), report)


def near_copy(text: str, length: int = 20_000) -> str:
    """``length`` characters of ``text`` with a letter in 37 upper-cased, one in 53 replaced and every
    sentence joined to the next: a near-copy that no rule but the fuzzy one could align."""
    piece = text[5000 : 5000 + length]
    edited = "".join(
        c.upper() if i % 37 == 0 and c.islower() else ("x" if i % 53 == 0 else c) for i, c in enumerate(piece)
    )
    return edited.replace(". ", "; ")


@contextlib.contextmanager
def deadline(seconds: int):
    """A TimeoutError once ``seconds`` have passed in the block."""

    def stop(*_):
        raise TimeoutError(f"still aligning after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_long_near_copy_is_aligned_in_bounded_time_and_says_why_it_is_unlocated(tmp_path):
    """A 20,000-character evidence string near-copying its text (over 600 s on 70baafc): the fuzzy rule
    aligns at most MAX_FUZZY normalised characters, so it is unlocated at once, with the cap named in
    the report; a shorter near-copy is still located by the fuzzy rule."""
    text = max((q.context for q in load_questions("longdep_qa", DataSource())), key=len)
    folder = tmp_path / "data"
    folder.mkdir()
    row = {"title": "Near copy", "input": text, "output": None}
    row["qa_pairs"] = qa_pairs(("What happened?", "much", [near_copy(text)], "computation"))
    (folder / "longdep_qa.jsonl").write_text(json.dumps(row) + "\n")
    with deadline(60):
        result = run(compose_config("loogle_evidence", [f"data={folder}", "task=longdep_qa",
                                                        f"out={tmp_path / 'e.json'}"]))  # fmt: skip
    (report,) = result["tasks"]
    (miss,) = report["unlocated"]
    assert miss["note"] == f"over MAX_FUZZY={MAX_FUZZY} normalised characters: not aligned"
    assert f"(over MAX_FUZZY={MAX_FUZZY}" in "\n".join(loogle_evidence.table_lines(result["tasks"]))
    assert result["alignment"]["max_fuzzy"] == MAX_FUZZY and result["alignment"]["max_windows"] == 8
    with deadline(60):
        found = locate(near_copy(text, 900), Document(text))
    assert found.rule == "fuzzy" and found.ratio >= 0.9


def test_task_all_on_a_folder_locates_each_task_it_has(tmp_path, loogle_dir):
    """`make loogle-evidence task=all data=<folder>` demanded all four tasks of a folder that holds two;
    it locates each task the folder has."""
    result = run(compose_config("loogle_evidence", [f"data={loogle_dir}", f"out={tmp_path / 'e.json'}"]))
    assert [r["task"] for r in result["tasks"]] == ["shortdep_qa", "longdep_qa"]
