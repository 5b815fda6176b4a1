"""LooGLE's data in both layouts, its protocol on a tiny random model (the cut, the predictions file,
resuming a killed run), and each bad input as one ``error:`` line with exit status 2 and nothing
half-written."""

from __future__ import annotations

import json
import re

import pytest

from pipeline.commands import leaderboard as leaderboard_command
from pipeline.errors import PipelineError
from pipeline.loogle.data.bounds import jsonl_rows
from pipeline.loogle.data.questions import SAMPLE_DIR, questions_from_rows
from pipeline.loogle.data.reading import DataSource, fingerprint, load_questions
from pipeline.loogle.generation import answering as run
from pipeline.loogle.generation import decoding as generation
from pipeline.reporting import loogle as loogle_board
from pipeline.results import loogle as loogle_results
from tests.support import base_rows, cli, compose_config, error_lines, loogle_run_overrides, write_lines

PICARDO = "José Luis Picardo"


def test_the_sample_holds_the_wikipedia_questions():
    short, long = (load_questions(t, DataSource()) for t in ("shortdep_qa", "longdep_qa"))
    assert (len(short), len(long)) == (11, 13)
    assert {q.doc_id for q in long} == {PICARDO, "Assassination of Shinzo Abe"}
    assert short[0].context == long[0].context and short[0].qid == f"{PICARDO}#0"
    with pytest.raises(PipelineError, match="sample has no shortdep_cloze: its texts' licenses"):
        load_questions("shortdep_cloze", DataSource())


def test_the_question_layout_gives_the_same_questions():
    documents = load_questions("longdep_qa", DataSource())
    rows = [
        {"title": q.doc_id, "context": q.context, "question": q.question, "answer": q.answer}
        | {"evidence": list(q.evidence), "type": q.kind}
        for q in documents
    ]
    assert questions_from_rows("longdep_qa", rows, "rows") == documents
    cloze = [{"context": "text", "question": "Who is <mask-0>?", "answer": "{'<mask-0>': 'Bob'}"}] * 2
    questions = questions_from_rows("shortdep_cloze", cloze, "rows")
    assert [q.qid for q in questions] == ["doc-0#0", "doc-0#1"] and questions[0].answer == {"<mask-0>": "Bob"}


@pytest.mark.parametrize(
    "qa_pairs, message",
    [
        ("[{'Q': 'a', 'A': 'b'", "not a Python literal"),
        ("__import__('os').getcwd()", "not a Python literal"),  # read, never run
        ("[{'Q': 'a'}]", "item 0: expected a mapping with Q and A"),
        ("{'Q': 'a', 'A': 'b'}", "expected a non-empty list"),
    ],
)
def test_malformed_qa_pairs(qa_pairs, message):
    row = {"input": "text", "title": "t", "qa_pairs": qa_pairs, "output": None}
    with pytest.raises(PipelineError, match=message):
        questions_from_rows("shortdep_qa", [row], "rows")


def test_the_hub_dataset_offline_is_one_line_naming_it_and_the_fix():
    with pytest.raises(PipelineError) as caught:
        load_questions("longdep_qa", DataSource("hub", revision="bdc356116a09a6a3d552e28a9f330878915b1696"))
    message = str(caught.value)
    assert "\n" not in message and "bigainlco/LooGLE" in message and "hf download" in message
    with pytest.raises(PipelineError, match="needs the revision"):
        load_questions("longdep_qa", DataSource("hub", revision=None))
    assert compose_config("loogle", [])["revision"] == "bdc356116a09a6a3d552e28a9f330878915b1696"


def test_the_cut_keeps_the_first_and_last_halves_of_the_tokens(tokenizer):
    question = load_questions("shortdep_qa", DataSource())[0]
    ids = tokenizer(generation.prompt_for(question).text)["input_ids"]
    cut = generation.cut_prompt(tokenizer, question, 301)
    assert (
        cut.ids == ids[:150] + ids[-150:]
        and cut.prompt_tokens == len(ids)
        and cut.cut_tokens == len(ids) - 300
    )
    assert tokenizer.decode(cut.ids).endswith(f"Question: {question.question}\nAnswer: ")
    with pytest.raises(PipelineError, match="cannot fit even its instruction and question"):
        generation.cut_prompt(tokenizer, question, 20)


def loogle_overrides(model_dir, out, *extra: str) -> list[str]:
    results = out / "results" / "loogle.jsonl"
    return loogle_run_overrides(model_dir, out, results, *extra, limit=3, new_tokens=3)


def test_make_loogle_writes_a_line_per_question_and_resumes(tiny_model_dir, tmp_path, monkeypatch):
    from pipeline.commands.loogle import run as loogle

    result = loogle(compose_config("loogle", loogle_overrides(tiny_model_dir, tmp_path)))
    summary = loogle_board.run_summary(result, tmp_path / "results" / "loogle.jsonl")
    assert re.search(r"time +wall \d+ s, CPU \d+ s \([\d.]+ s and [\d.]+ s a question\)", summary)
    (path,) = tmp_path.glob("*.jsonl")
    (line,) = loogle_results.read_rows(tmp_path / "results" / "loogle.jsonl")
    assert (line["task"], line["n_questions"], line["settings"]["limit"]) == ("shortdep_qa", 3, 3)
    assert line["metrics"] == result["shortdep_qa"]["metrics"] and line["model"]["weights_sha256"]
    assert line["cpu_seconds"] > 0 and line["batch_size"] == 8 and line["measured_by"] == "make loogle"
    board = loogle_board.files(tmp_path / "results" / "loogle.jsonl")["loogle.md"].decode()
    # make leaderboard: the LooGLE table beside LongPPL's, from loogle.jsonl beside the scores file
    scores = write_lines(tmp_path / "results" / "scores.jsonl", base_rows())
    out = tmp_path / "board"
    paths = leaderboard_command.run(compose_config("leaderboard", [f"results={scores}", f"out_dir={out}"]))
    assert paths["loogle.md"].read_text() == board and (out / "leaderboard.md").is_file()
    assert re.search(rf"\| {tiny_model_dir.name} \| shortdep_qa \| sample \| 3 \| 509 \|", board), board
    rows = jsonl_rows(path)
    assert [r["qid"] for r in rows] == [f"{PICARDO}#{i}" for i in range(3)]
    assert rows[0]["max_length"] == 512 - 3  # the tiny model's context less the new tokens
    assert rows[0]["kept_tokens"] == 508 and rows[0]["cut_tokens"] == rows[0]["prompt_tokens"] - 508
    assert rows[0]["fingerprint"] == fingerprint(load_questions("shortdep_qa", DataSource())[:3])
    assert result["shortdep_qa"]["n_questions"] == 3
    # killed after two questions: the run resumes with the third and generates nothing else
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    calls = []
    real = run.decode_document
    monkeypatch.setattr(run, "decode_document", lambda *a: calls.append(len(a[2])) or real(*a))
    loogle(compose_config("loogle", loogle_overrides(tiny_model_dir, tmp_path)))
    # the same lines; the closest call's margin is computed in another batch (float rounding)
    again = [{k: v for k, v in r.items() if k != "closest_call"} for r in jsonl_rows(path)]
    assert calls == [1] and again == [{k: v for k, v in r.items() if k != "closest_call"} for r in rows]
    assert len(loogle_board.table(tmp_path / "results" / "loogle.jsonl")) == 1  # the same entry, newest kept
    # make loogle-metrics on the predictions file: a line of the same entry (model identity, task,
    # questions, settings) with the same metrics
    from pipeline.commands.loogle_metrics import run as loogle_metrics

    results = tmp_path / "results" / "loogle.jsonl"
    loogle_metrics(
        compose_config("loogle_metrics", [f"predictions={path}", "task=shortdep_qa", f"results={results}"])
    )
    *_, ours, theirs = loogle_results.read_rows(results)
    assert loogle_results.loogle_key(theirs) == loogle_results.loogle_key(ours) is not None
    assert theirs["metrics"] == ours["metrics"] and theirs["measured_by"] == "make loogle-metrics"
    assert theirs["model"] == ours["model"] and len(loogle_board.table(results)) == 1


def test_bad_inputs_are_one_error_line_and_write_nothing(tiny_model_dir, tmp_path):
    """make loogle-metrics: empty, another task's, another sample's, partial and malformed files; make
    loogle: malformed qa_pairs and a prompt that cannot hold its question."""
    sample = load_questions("shortdep_qa", DataSource())
    line = {"task": "shortdep_qa", "data": "sample", "fingerprint": fingerprint(sample), "limit": None}
    files = {
        "empty": "",
        "task": json.dumps({**line, "task": "longdep_qa", "qid": "x", "prediction": "p"}) + "\n",
        "sample": json.dumps({**line, "fingerprint": "0" * 12, "qid": "x", "prediction": "p"}) + "\n",
        "count": json.dumps({**line, "qid": sample[0].qid, "prediction": "p"}) + "\n",
        "malformed": json.dumps({"qa_pairs": "[{'Q': 1", "llm_output": ["a"], "output": ["b"]}) + "\n",
        "shape": json.dumps({"qa_pairs": "none", "llm_output": ["a"], "output": ["b"]}) + "\n",
    }
    messages = {
        "empty": "is empty",
        "task": "predictions of task longdep_qa, not shortdep_qa",
        "sample": "predictions of other questions",
        "count": "has predictions for 1 of its 11 questions: finish the run",
        "malformed": "not a Python literal",
        "shape": "no question per answer",
    }
    for name, text in files.items():
        (tmp_path / f"{name}.jsonl").write_text(text)
    paths = ",".join(str(tmp_path / f"{name}.jsonl") for name in files)
    done = cli(
        "pipeline.commands.loogle_metrics",
        "--multirun",
        f"predictions={paths}",
        "task=shortdep_qa",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    lines = error_lines(done.stderr)
    assert len(lines) == len(files)
    for name, message in messages.items():
        assert re.search(message, next(x for x in lines if f"{name}.jsonl" in x)), name
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "shortdep_qa.jsonl").write_text(
        json.dumps({"input": "t", "title": "t", "qa_pairs": "[{", "output": None})
    )
    out = tmp_path / "predictions"
    done = cli(
        "pipeline.commands.loogle",
        "--multirun",
        *loogle_overrides(
            tiny_model_dir,
            out,
            f"data={SAMPLE_DIR},{bad}",
            "max_length=12",
            f"hydra.sweep.dir={tmp_path / 'sweep2'}",
        ),
    )
    lines = error_lines(done.stderr)
    assert len(lines) == 2
    assert any("cannot fit even its instruction and question" in x for x in lines)
    assert any("qa_pairs of" in x and "not a Python literal" in x for x in lines)
    assert not out.exists() or not list(out.iterdir())


def test_a_hub_download_folder_with_the_later_config_names(tmp_path):
    (tmp_path / "data").mkdir()
    row = {"input": "A paper.", "title": "2201.00001", "qa_pairs": "none", "output": "Its abstract."}
    (tmp_path / "data" / "summarization.jsonl").write_text(json.dumps(row) + "\n")
    (question,) = load_questions("longdep_summarization", DataSource(str(tmp_path)))
    assert (question.qid, question.question, question.answer) == ("2201.00001#0", "", "Its abstract.")


def test_make_loogle_refuses_a_timeline_question_without_an_order_before_the_model_loads(
    tiny_model_dir, tmp_path, loogle_dir, monkeypatch
):
    """loogle_dir's Beta question is typed timeline_reorder with the answer "red": one error before
    any model loads (its metrics would otherwise come after the whole run)."""
    from pipeline.commands.loogle import run as loogle
    from pipeline.models import loading

    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("the model loaded"))
    overrides = [o for o in loogle_overrides(tiny_model_dir, tmp_path) if not o.startswith("task=")]
    cfg = compose_config("loogle", [*overrides, "task=longdep_qa", f"data={loogle_dir}"])
    with pytest.raises(PipelineError, match=r"type 'timeline_reorder' has the answer 'red'"):
        loogle(cfg)
    assert not list(tmp_path.glob("*.jsonl"))


def test_make_loogle_refuses_a_type_none_of_loogles_before_the_model_loads(
    tiny_model_dir, tmp_path, monkeypatch
):
    """A question typed "reorder" (no LooGLE type) was silently not a timeline question: one error,
    naming the question and the type, before any model loads."""
    from pipeline.commands.loogle import run as loogle
    from pipeline.models import loading
    from tests.support import loogle_folder

    folder = loogle_folder(tmp_path / "data")
    path = folder / "longdep_qa.jsonl"
    path.write_text(path.read_text().replace("'computation'", "'reorder'"))
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("the model loaded"))
    overrides = [o for o in loogle_overrides(tiny_model_dir, tmp_path) if not o.startswith("task=")]
    cfg = compose_config("loogle", [*overrides, "task=longdep_qa", f"data={folder}"])
    with pytest.raises(PipelineError, match=r"longdep_qa Alpha#1: type 'reorder' is none of LooGLE's"):
        loogle(cfg)


@pytest.mark.parametrize("value", ["true", "2.5", "'3'"])
def test_a_batch_size_that_is_no_whole_number_is_refused_before_the_model_loads(
    tiny_model_dir, tmp_path, monkeypatch, value
):
    """batch_size=true was taken as 1."""
    from pipeline.commands.loogle import run as loogle
    from pipeline.models import loading

    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("the model loaded"))
    cfg = compose_config("loogle", loogle_overrides(tiny_model_dir, tmp_path, f"batch_size={value}"))
    with pytest.raises(PipelineError, match=r"^setting batch_size="):
        loogle(cfg)


def test_task_all_on_a_folder_runs_each_task_it_has(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """task=all on a data folder demanded all four tasks; it runs each the folder has, says which, and
    a folder with none is one line."""
    from pipeline.commands.loogle import run as loogle
    from tests.support import loogle_folder

    folder = loogle_folder(tmp_path / "data")
    overrides = [o for o in loogle_overrides(tiny_model_dir, tmp_path / "out") if not o.startswith("task=")]
    cfg = compose_config("loogle", [*overrides, "task=all", f"data={folder}", "limit=1", "max_new_tokens=1"])
    path = folder / "longdep_qa.jsonl"
    path.write_text(path.read_text().replace("'timeline_reorder'", "'computation'"))
    result = loogle(cfg)
    assert list(result) == ["shortdep_qa", "longdep_qa"]
    assert "task=all: " in capsys.readouterr().out
    assert loogle_board.run_summary(result, None).startswith("tasks         shortdep_qa, longdep_qa\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    cfg = compose_config("loogle", [*overrides, "task=all", f"data={empty}"])
    with pytest.raises(PipelineError, match=r"holds none of LooGLE's tasks"):
        loogle(cfg)
