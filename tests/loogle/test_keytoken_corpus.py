"""LooGLE's documents as a key-token corpus (``pipeline.loogle.data.keytoken_corpus``): distinct texts with
stable ids, their questions and located evidence written beside the key tokens and checked on load
(``pipeline.artifact.qa``), an artifact without questions exactly as before, and the errors a user
meets (no questions in an artifact; the Hub dataset offline)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.artifact.identity import tables_sha256
from pipeline.artifact.qa import artifact_questions
from pipeline.artifact.reader import load_artifact
from pipeline.errors import PipelineError
from pipeline.loogle.data.keytoken_corpus import load_loogle_corpus
from pipeline.provenance import file_sha256, text_sha256
from pipeline.text.corpus import CorpusSpec
from tests.support import (
    EARLY,
    ROOT,
    TEXT_A,
    TEXT_B,
    compose_config,
    compose_keytokens,
    keytokens_overrides,
    one_error,
    run_cli,
    run_keytokens,
)


def loogle_spec(folder: Path, tasks=("shortdep_qa", "longdep_qa")) -> CorpusSpec:
    node = compose_keytokens(["corpus=loogle_sample", f"corpus.loogle={folder}"])["corpus"]
    return dataclasses.replace(CorpusSpec.parse(node), tasks=tuple(tasks))


def test_documents_are_distinct_texts_with_ids_from_their_hash(loogle_dir):
    corpus = load_loogle_corpus(loogle_spec(loogle_dir))
    ids = [f"loogle-{text_sha256(t)[:12]}" for t in (TEXT_A, TEXT_B)]
    assert [d.id for d in corpus.documents] == ids and [d.text for d in corpus.documents] == [TEXT_A, TEXT_B]
    assert [q.task for q in corpus.questions[ids[0]]] == ["shortdep_qa", "longdep_qa", "longdep_qa"]
    reversed_ = load_loogle_corpus(loogle_spec(loogle_dir, ("longdep_qa", "shortdep_qa")))
    assert {d.id: d.text for d in reversed_.documents} == {d.id: d.text for d in corpus.documents}
    alone = load_loogle_corpus(loogle_spec(loogle_dir, ("shortdep_qa",)))
    assert [d.id for d in alone.documents] == ids[:1]  # the same id from either task


def test_the_embedded_sample_is_two_documents_with_their_questions():
    spec = CorpusSpec.parse(compose_keytokens(["corpus=loogle_sample"])["corpus"])
    corpus = load_loogle_corpus(spec)
    rows = [json.loads(line) for t in spec.tasks for line in (ROOT / f"data/loogle/{t}.jsonl").open()]
    assert len(rows) == 3 and len(corpus.documents) == len({r["input"] for r in rows}) == 2
    assert sum(map(len, corpus.questions.values())) == 11 + 6 + 7
    assert corpus.record["source"] == "sample" and set(corpus.record["tasks"]) == set(spec.tasks)


def test_questions_and_evidence_travel_with_the_artifact(loogle_artifact):
    art = load_artifact(loogle_artifact)
    questions = artifact_questions(art)
    assert [q.source_id for q in questions] == [
        "shortdep_qa/Alpha#0",
        "longdep_qa/Alpha#0",
        "longdep_qa/Alpha#1",
        "longdep_qa/Beta#0",
    ]
    assert [q.type for q in questions] == [
        None,
        "comprehension_and_reasoning",
        "computation",
        "timeline_reorder",
    ]
    texts = art.texts()
    early, marked = questions[0].evidence[0], questions[1].evidence[0]
    assert early.rule == "exact" and TEXT_A[slice(*early.spans[0])] == EARLY
    assert marked.rule == "normalised" and TEXT_A[slice(*marked.spans[0])] == EARLY  # [6] is not in the text
    late, missing = questions[1].evidence[1], questions[2].evidence[0]
    assert missing.rule == "unlocated" and missing.spans == () and not missing.inside(10**6)
    n_chars = len(texts[questions[0].doc_id])
    assert n_chars < len(TEXT_A) and early.inside(n_chars) and not late.inside(n_chars)  # past the cut
    kept = {d["doc_id"]: d for d in art.manifest["questions"]["documents"]}
    alpha = kept[questions[0].doc_id]
    assert (alpha["n_questions"], alpha["n_evidence"], alpha["located"], alpha["inside_kept"]) == (3, 4, 3, 2)
    assert alpha["n_tokens"] == 150 < alpha["n_source_tokens"] and alpha["n_chars"] == n_chars
    assert art.manifest["questions"]["source"] == Path(art.settings["corpus"]["loogle"]).name
    assert art.settings["corpus"]["tasks"] == ["shortdep_qa", "longdep_qa"]


def rewrite(root: Path, name: str, table: pa.Table) -> None:
    """A tampered table with its manifest's hash redone, as a careful forger would."""
    pq.write_table(table, root / f"{name}.parquet")
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["files"][f"{name}.parquet"]["sha256"] = file_sha256(root / f"{name}.parquet")
    (root / "manifest.json").write_text(json.dumps(manifest))


def test_a_tampered_question_table_is_refused(loogle_artifact, tmp_path):
    import shutil

    for case, message in (
        ("hash", "does not match the sha256"),
        ("span", "is not inside its source text"),
        ("exact", "not its evidence string"),
        ("order", "question_index"),
        ("record", "says inside_kept is 3, the tables 2"),
        ("rule", "rule 'guessed' is none of exact, normalised, pieces, fuzzy, sentences, unlocated"),
    ):
        root = tmp_path / case
        shutil.copytree(loogle_artifact, root)
        evidence = pq.read_table(root / "evidence.parquet").to_pylist()
        if case == "hash":
            (root / "questions.parquet").write_bytes((root / "questions.parquet").read_bytes()[:-9])
        elif case == "record":
            manifest = json.loads((root / "manifest.json").read_text())
            manifest["questions"]["documents"][0]["inside_kept"] += 1
            (root / "manifest.json").write_text(json.dumps(manifest))
        elif case == "order":
            questions = pq.read_table(root / "questions.parquet")
            rewrite(root, "questions", pa.Table.from_pylist(questions.to_pylist()[::-1], questions.schema))
        else:
            if case == "rule":  # a rule no writer writes
                evidence[0]["rule"] = "guessed"
            else:
                evidence[0]["char_end"] += 10**6 if case == "span" else 1
            rewrite(
                root, "evidence", pa.Table.from_pylist(evidence, pq.read_schema(root / "evidence.parquet"))
            )
        with pytest.raises(PipelineError, match=message) as caught:
            load_artifact(root)
        assert "\n" not in str(caught.value)


def test_an_artifact_without_questions_is_as_before_and_says_so(tiny_artifact):
    art = load_artifact(tiny_artifact)
    assert not art.has_questions and "questions" not in art.manifest
    assert sorted(art.manifest["files"]) == ["documents.parquet", "spans.parquet", "tokens.parquet"]
    assert sorted(p.name for p in tiny_artifact.iterdir() if p.suffix == ".parquet") == sorted(
        art.manifest["files"]
    )
    assert art.contents == tables_sha256({n: getattr(art, n) for n in ("documents", "tokens", "spans")})
    with pytest.raises(
        PipelineError, match=r"has no questions \(its corpus 'local' carries none\)"
    ) as caught:
        art.questions  # noqa: B018 (the property raises)
    assert "\n" not in str(caught.value) and "corpus=loogle_sample" in str(caught.value)
    sample = CorpusSpec.parse(compose_keytokens([])["corpus"])
    keys = ["name", "path", "dataset", "split", "revision", "text_field"]
    assert list(sample.record()) == keys  # the default corpus's record, so its fingerprint, unchanged


def test_the_hub_corpus_is_pinned_and_offline_is_one_line(tiny_model_dir, tmp_path):
    spec = CorpusSpec.parse(compose_keytokens(["corpus=loogle"])["corpus"])
    assert spec.revision == compose_config("loogle", [])["revision"] and spec.needs_network
    overrides = [
        o for o in keytokens_overrides(tiny_model_dir, "unused", tmp_path) if not o.startswith("corpus")
    ]
    line = one_error(run_cli("pipeline.commands.keytokens", *overrides, "corpus=loogle"))
    assert "bigainlco/LooGLE" in line and "hf download" in line and "corpus.loogle=DIR" in line
    assert not (tmp_path / "test").exists()


def test_a_task_named_twice_is_refused_before_anything_runs(tiny_model_dir, tmp_path, monkeypatch):
    """corpus.tasks=[longdep_qa,longdep_qa] ran the whole stage 1, then refused its own artifact as
    "damaged or edited": one line at once, naming the task and the setting to give."""
    from pipeline.models import loading

    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("the model loaded"))
    overrides = [
        o for o in keytokens_overrides(tiny_model_dir, "unused", tmp_path) if not o.startswith("corpus")
    ]
    cfg = compose_keytokens(
        [*overrides, "corpus=loogle_sample", "corpus.tasks=[longdep_qa,shortdep_qa,longdep_qa]"]
    )
    with pytest.raises(PipelineError) as caught:
        run_keytokens(cfg)
    assert str(caught.value) == (
        "setting corpus.tasks=['longdep_qa', 'shortdep_qa', 'longdep_qa']: names longdep_qa twice: name each "
        "task once ([longdep_qa,shortdep_qa])"
    )
    assert not (tmp_path / "test").exists()


def test_a_published_folder_keeps_the_questions(loogle_artifact, tmp_path):
    from pipeline.sharing.hub_dataset import prepare_folder

    out = prepare_folder(loogle_artifact, tmp_path / "publish", "someone/loogle-keytokens", "mit")
    copy, original = load_artifact(out), load_artifact(loogle_artifact)
    assert copy.questions.equals(original.questions) and copy.evidence.equals(original.evidence)
    assert copy.contents == original.contents and "config_name: evidence" in (out / "README.md").read_text()
