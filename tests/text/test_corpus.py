"""Corpus loading: JSONL, Parquet, and the Hub code path on a local dataset folder (offline); a file
that is no corpus, a bad selection setting or a bad row is refused when read, before any model loads,
never silently changed."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import PipelineError
from pipeline.provenance import text_sha256
from pipeline.text.corpus import CorpusSpec, load_corpus
from tests.support import ROOT

TEXTS = ["CRLF\r\nline", "NUL \x00 inside", "emoji 👩‍👩‍👧 CJK 中文 e\u0301"]


def test_shipped_sample_matches_its_recorded_hashes():
    import json

    rows = [json.loads(line) for line in (ROOT / "data/govreport-sample.jsonl").open(encoding="utf-8")]
    docs = load_corpus(CorpusSpec(name="s", path=str(ROOT / "data/govreport-sample.jsonl")))
    assert len(docs) == 13
    for doc, row in zip(docs, rows, strict=True):
        assert doc.sha256 == row["sha256"] == text_sha256(row["text"]) and len(doc.text) == row["n_chars"]


def test_jsonl_keeps_texts_exactly(write_corpus):
    docs = load_corpus(
        CorpusSpec(name="c", path=str(write_corpus([{"id": i, "text": t} for i, t in enumerate(TEXTS)])))
    )
    assert [d.text for d in docs] == TEXTS and [d.id for d in docs] == ["0", "1", "2"]


def test_parquet_without_id_column_numbers_rows(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"body": TEXTS}), path)
    docs = load_corpus(CorpusSpec(name="mine", path=str(path), text_field="body"))
    assert [d.id for d in docs] == ["mine-00000", "mine-00001", "mine-00002"] and docs[2].text == TEXTS[2]


def test_hub_code_path_on_a_local_dataset_folder(tmp_path):
    folder = tmp_path / "dataset"
    folder.mkdir()
    pq.write_table(pa.table({"report": TEXTS}), folder / "test.parquet")
    spec = CorpusSpec(name="hub", dataset=str(folder), split="test", text_field="report", id_field=None)
    assert not spec.needs_network
    assert [d.text for d in load_corpus(spec)] == TEXTS


def test_unreachable_hub_dataset_names_the_fix(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(PipelineError, match=r"corpus=local corpus\.path"):
        load_corpus(CorpusSpec(name="hub", dataset="org/not-here"))


def test_not_a_json_object_per_line(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "a"}\n[1, 2]\n')
    with pytest.raises(PipelineError, match="line 2: expected a JSON object"):
        load_corpus(CorpusSpec(name="c", path=str(path)))


def test_pretokenized_dataset_is_selected_and_decoded_as_the_official_script(tmp_path, tokenizer):
    """The paper's selection on a local copy of a pre-tokenized dataset: rows with tokenized_len >= the
    minimum, the first N of them, input_ids[:max_ids] decoded by the tokenizer's batch_decode."""
    import datasets

    texts = [
        "short text",
        "Federal law provides powers. " * 4,
        "a",
        "The Congressional Research Service. " * 3,
    ]
    ids = [[tokenizer.bos_token_id, *tokenizer(t, add_special_tokens=False)["input_ids"]] for t in texts]
    data = datasets.Dataset.from_dict({"input_ids": ids, "tokenized_len": [len(i) for i in ids]})
    data.save_to_disk(tmp_path / "dataset")
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    spec = CorpusSpec(
        name="paper",
        dataset=str(tmp_path / "dataset"),
        tokenized_with=str(tmp_path / "tokenizer"),
        min_tokenized_len=6,
        max_ids=9,
        limit=1,
        id_field=None,
    )
    assert not spec.needs_network
    docs = load_corpus(spec)
    kept = [i for i in ids if len(i) >= 6][:1]
    assert [d.id for d in docs] == ["paper-00000"]
    assert docs[0].text == tokenizer.batch_decode([kept[0][:9]])[0]
    assert docs[0].text.startswith("<bos>")  # decoded with special tokens, as the official script does


def test_a_dataset_without_ids_or_texts_is_one_line(tmp_path, tokenizer):
    import datasets

    datasets.Dataset.from_dict({"body": ["plain"]}).save_to_disk(tmp_path / "plain")
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    spec = CorpusSpec(name="p", dataset=str(tmp_path / "plain"), tokenized_with=str(tmp_path / "tokenizer"))
    with pytest.raises(PipelineError, match=r"neither input_ids \(pre-tokenized\) nor a 'text' column"):
        load_corpus(spec)


BOOKS = [
    "A short book. " * 2,
    "The long voyage went on. " * 9,
    "Chapter one. " * 6,
    "It was a dark night. " * 8,
]


def plain_books(tmp_path, tokenizer, **selection) -> tuple[CorpusSpec, list[list[int]]]:
    """PG-19's layout (plain texts, no ids) saved locally, and a selection in the tiny tokenizer's tokens."""
    import datasets

    titles = [f"book {i}" for i in range(len(BOOKS))]
    datasets.Dataset.from_dict({"short_book_title": titles, "text": BOOKS}).save_to_disk(tmp_path / "books")
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in BOOKS]
    spec = CorpusSpec(
        name="books",
        dataset=str(tmp_path / "books"),
        tokenized_with=str(tmp_path / "tokenizer"),
        id_field=None,
        **selection,
    )
    return spec, ids


def test_plain_texts_are_tokenized_selected_and_decoded_once(tmp_path, tokenizer):
    """Plain books (PG-19's layout): tokenized by the reference tokenizer without special tokens, the
    first ``limit`` of at least ``min_tokenized_len`` tokens kept, each cut to ``max_ids`` and decoded;
    every document carries its length in reference tokens."""
    lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in BOOKS]
    threshold = sorted(lengths)[1] + 1  # two books are long enough
    spec, ids = plain_books(tmp_path, tokenizer, min_tokenized_len=threshold, max_ids=threshold - 1, limit=2)
    docs = load_corpus(spec)
    kept = [i for i, n in enumerate(lengths) if n >= threshold]
    assert len(kept) == 2 and [d.id for d in docs] == ["books-00000", "books-00001"]
    assert [d.text for d in docs] == [tokenizer.batch_decode([ids[i][: threshold - 1]])[0] for i in kept]
    assert [d.reference_tokens for d in docs] == [lengths[i] for i in kept]
    assert all(len(tokenizer(d.text, add_special_tokens=False)["input_ids"]) <= threshold for d in docs)


@pytest.mark.parametrize("too_few", ["keep", "longest"])
def test_too_few_long_texts_keep_those_or_the_longest_and_say_so(tmp_path, tokenizer, capsys, too_few):
    lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in BOOKS]
    threshold = max(lengths)  # one book is long enough, three are asked for
    spec, _ = plain_books(tmp_path, tokenizer, min_tokenized_len=threshold, limit=3, too_few=too_few)
    docs = load_corpus(spec)
    said = capsys.readouterr().out
    assert (
        f"only 1 of 4 texts in {tmp_path / 'books'} (test) have at least {threshold} reference tokens" in said
    )
    if too_few == "keep":
        assert [d.reference_tokens for d in docs] == [threshold] and "kept those" in said
    else:  # the 3 longest, in the dataset's order
        longest = sorted(range(4), key=lambda i: -lengths[i])[:3]
        assert [d.reference_tokens for d in docs] == [lengths[i] for i in sorted(longest)]
        assert f"kept the 3 longest (the shortest has {min(lengths[i] for i in longest)}" in said
        assert spec.record()["too_few"] == "longest"


def test_the_default_selection_records_what_it_always_did(tmp_path, tokenizer):
    """``too_few=keep`` (the paper's corpus) is not in the record: existing fingerprints stay as they are."""
    spec, _ = plain_books(tmp_path, tokenizer)
    assert "too_few" not in spec.record() and "min_tokenized_len" in spec.record()


def corpus_error(spec_or_rows, tmp_path, **spec) -> str:
    from pipeline.text.corpus import CorpusSpec, load_corpus

    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in spec_or_rows))
    with pytest.raises(PipelineError) as raised:
        load_corpus(CorpusSpec(name="c", path=str(path), **spec))
    return str(raised.value)


def test_corpus_files_that_are_no_corpus(tmp_path):
    from pipeline.text.corpus import CorpusSpec, decoded_rows, load_corpus

    (tmp_path / "fake.parquet").write_text("id,text\n1,not parquet\n")
    with pytest.raises(
        PipelineError, match=r"^corpus file .*fake\.parquet is not a readable Parquet file \("
    ):
        load_corpus(CorpusSpec(name="c", path=str(tmp_path / "fake.parquet")))
    said = corpus_error([{"id": None, "text": "a"}], tmp_path)
    assert said.endswith(
        "row 0: its document id 'id' is null, not text or a whole number: give every row an id, or set "
        "corpus.id_field=null to number the rows"
    )
    spec = CorpusSpec(name="c", dataset="d", tokenized_with="t")  # 0 rows said: no column input_ids
    with pytest.raises(
        PipelineError, match=r"^corpus d \(test\) has no rows: pass a dataset with texts in it$"
    ):
        decoded_rows([], spec, "d (test)")
    said = corpus_error([{"id": "ok", "text": "a"}, {"id": "\ud800", "text": "b"}], tmp_path)
    assert "row 1: its id 'id': character 0 is a lone surrogate (U+D800)" in said


@pytest.mark.parametrize(
    ("setting", "value"), [("limit", -1), ("max_ids", -5), ("max_ids", 0), ("min_tokenized_len", -1)]
)
def test_corpus_selection_settings_out_of_range_are_refused(setting, value):
    """corpus.limit=-1 dropped the last row; max_ids=-5 cut five ids off every text."""
    from pipeline.text.corpus import CorpusSpec

    with pytest.raises(
        PipelineError, match=f"setting corpus.{setting}={value}: Input should be greater than"
    ):
        CorpusSpec.parse({"name": "c", "dataset": "d", setting: value})


def saved_dataset(tmp_path, tokenizer, columns) -> dict:
    import datasets

    datasets.Dataset.from_dict(columns).save_to_disk(tmp_path / "dataset")
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    return {
        "dataset": str(tmp_path / "dataset"),
        "tokenized_with": str(tmp_path / "tokenizer"),
        "id_field": None,
    }


@pytest.mark.parametrize(
    ("columns", "said"),
    [
        ({"text": ["a text", None]}, "row 1: 'text' is null, not text"),
        ({"input_ids": ["1 2 3"], "tokenized_len": [3]}, "row 0: input_ids is str, not a list of token ids"),
        (
            {"input_ids": [[5, 6, 7]], "tokenized_len": [9]},
            "row 0: tokenized_len is 9 but input_ids holds 3 ids",
        ),
        (
            {"input_ids": [[5, 6, 7]], "tokenized_len": [3]},
            r": no row is selected \(none has 4 reference tokens or more\)$",
        ),
    ],
)
def test_a_pre_tokenized_corpus_is_checked_row_by_row(tmp_path, tokenizer, columns, said):
    from pipeline.text.corpus import CorpusSpec, load_corpus

    spec = CorpusSpec(name="c", min_tokenized_len=4, **saved_dataset(tmp_path, tokenizer, columns))
    with pytest.raises(PipelineError, match=said):
        load_corpus(spec)
