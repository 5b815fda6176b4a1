"""Corpora of long documents: the shipped GovReport sample, local JSONL/Parquet files, Hub datasets,
and pre-tokenized datasets decoded as the paper's official code decodes them.

Texts are taken exactly as stored (no normalisation, CRLF and NUL kept): character spans in the
artifacts index into these exact strings, tied to them by their sha256.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
import pydantic.dataclasses
from pydantic import AfterValidator
from tqdm.auto import tqdm

from pipeline.definition import Positive
from pipeline.errors import PipelineError, settings_type
from pipeline.files import locate_input
from pipeline.provenance import text_sha256
from pipeline.settings import NonNegative, parse


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    reference_tokens: int | None = None  # its length in the reference tokenizer's tokens (tokenized_with)

    @property
    def sha256(self) -> str:
        return text_sha256(self.text)


def check_unicode(text: str, where: str) -> None:
    """A text must be valid Unicode: a lone surrogate (half of a UTF-16 pair, e.g. from ``"\\ud800"`` in
    JSON) has no UTF-8 form, so no tokenizer reads it and no hash covers it; a PipelineError names it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PipelineError(
            f"{where}: character {exc.start} is a lone surrogate (U+{ord(text[exc.start]):04X}), not valid "
            "Unicode: fix the text (a UTF-16 pair cut in half?)"
        ) from None


def distinct_tasks(tasks: Sequence[str]) -> Sequence[str]:
    """LooGLE's ``corpus.tasks`` (and `make validate`'s ``loogle.tasks``), each named once: a task named
    twice would add its questions twice to its documents, and the artifact would fail its own checks
    after the whole stage ran."""
    twice = next((task for number, task in enumerate(tasks) if task in tasks[:number]), None)
    if twice is not None:
        once = ",".join(dict.fromkeys(tasks))
        raise ValueError(f"names {twice} twice: name each task once ([{once}])")
    return tasks


@settings_type
@pydantic.dataclasses.dataclass(frozen=True)
class CorpusSpec:
    """Where a corpus comes from. ``path`` (JSONL or Parquet) or ``dataset`` (a Hub id, or a local
    dataset directory saved with ``datasets``) is set.

    A corpus selected in a reference tokenizer's tokens names ``tokenized_with``: a pre-tokenized
    dataset (columns ``input_ids`` and ``tokenized_len``, as the paper's
    ``emozilla/govreport-test-tokenized``) or plain texts, which that tokenizer tokenizes (no special
    tokens). Its rows with ``tokenized_len >= min_tokenized_len`` are kept, the first ``limit`` of them,
    and each text is ``input_ids[:max_ids]`` decoded by that tokenizer with ``batch_decode``'s defaults,
    exactly as the official script builds the texts its key spans index. When fewer than ``limit`` rows
    are that long, ``too_few=keep`` keeps those, ``too_few=longest`` the ``limit`` longest rows (in the
    dataset's order); a line says how many were long enough, and each document records its length."""

    name: str
    path: str | None = None
    dataset: str | None = None
    config: str | None = None
    split: str = "test"
    revision: str | None = None
    text_field: str = "text"
    id_field: str | None = "id"
    tokenized_with: str | None = None  # Hub id or directory of the tokenizer that made input_ids
    tokenizer_revision: str | None = None
    min_tokenized_len: NonNegative = 0
    max_ids: Positive | None = None  # a negative one would cut ids off the end of every text
    limit: Positive | None = None  # a negative one would drop rows from the end
    too_few: Literal["keep", "longest"] = "keep"
    # LooGLE's documents with their questions (``pipeline.loogle.data.keytoken_corpus``): sample, hub
    # (``dataset`` at ``revision``) or a folder of its task files; ``tasks``: the tasks whose documents
    # are read.
    loogle: str | None = None
    tasks: Annotated[tuple[str, ...], AfterValidator(distinct_tasks)] = ("shortdep_qa", "longdep_qa")

    @classmethod
    def parse(cls, node: Any) -> CorpusSpec:
        """A ``conf/corpus/`` group (a mapping or an OmegaConf node), checked: an unknown key or a
        value of the wrong type is one PipelineError."""
        return parse(cls, node, prefix="corpus.", strict=True)

    def record(self) -> dict[str, Any]:
        """Where the texts came from, as a keytokens manifest records it (and, for texts decoded from
        a pre-tokenized dataset, how they were selected and decoded)."""
        if self.loogle:
            return {
                "name": self.name,
                "loogle": self.loogle,
                "dataset": self.dataset,
                "revision": self.revision,
                "tasks": list(self.tasks),
            }
        keys = ("name", "path", "dataset", "split", "revision", "text_field")
        if self.tokenized_with:
            keys += ("tokenized_with", "tokenizer_revision", "min_tokenized_len", "max_ids", "limit")
            keys += ("too_few",) if self.too_few != "keep" else ()
        return {k: getattr(self, k) for k in keys}

    @property
    def needs_network(self) -> bool:
        if self.loogle:
            return self.loogle == "hub"
        remote = [x for x in (self.dataset, self.tokenized_with) if x is not None]
        return any(not Path(x).exists() for x in remote)


Unreadable = list[dict[str, str]]  # rows that cannot be read: {"doc_id": "<file>:<row>", "reason": ...}


def load_corpus(spec: CorpusSpec, unreadable: Unreadable | None = None) -> list[Document]:
    """All documents of a corpus, in order, with unique ids. A row that cannot be read (a JSONL line
    that is not UTF-8, not JSON or not an object; a row whose text is missing or not text) is an
    error, or, given ``unreadable``, recorded there with its file and row, and left out (stage 1 skips
    it and goes on: its manifest records it as a skipped document)."""
    if spec.loogle:
        raise PipelineError(
            f"corpus '{spec.name}' holds LooGLE's documents with their questions: stage 1 reads it "
            '(`make keytokens ARGS="corpus=loogle_sample"`); elsewhere pass its texts as corpus=local'
        )
    if spec.path:
        path = locate_input(spec.path)
        if path.is_dir():
            raise PipelineError(f"corpus.path={spec.path} is a directory: pass a .jsonl or .parquet file")
        if not path.is_file():
            raise PipelineError(f"corpus file not found: {spec.path}")
        if path.suffix == ".parquet":
            rows = _parquet_rows(path)
        elif path.suffix in (".jsonl", ".json"):
            rows = _jsonl_rows(path, unreadable)
        else:
            raise PipelineError(f"corpus file {spec.path}: expected .jsonl or .parquet")
        where = str(path)
    elif spec.dataset:
        rows = _dataset_rows(spec)
        where = f"{spec.dataset} ({spec.split})"
        if spec.tokenized_with:
            return _documents(decoded_rows(rows, spec, where), spec, where, True, unreadable)
    else:
        raise PipelineError(f"corpus '{spec.name}' names neither corpus.path nor corpus.dataset")
    return _documents(rows, spec, where, False, unreadable)


def _documents(
    rows: list[dict[str, Any]], spec: CorpusSpec, where: str, selected: bool, unreadable: Unreadable | None
) -> list[Document]:
    """The rows as documents; ``selected``: rows of a selection in reference tokens (``decoded_rows``),
    whose ``tokenized_len`` each document records."""
    if selected and not rows:
        raise PipelineError(
            f"corpus {where}: no row is selected (none has {spec.min_tokenized_len} reference tokens or more)"
        )
    if rows and spec.text_field not in rows[0]:
        columns = ", ".join(sorted(k for k in rows[0] if k != LINE))
        raise PipelineError(
            f"corpus {where} has no '{spec.text_field}' column (columns: {columns}): "
            "set corpus.text_field=<column>"
        )
    docs: list[Document] = []
    seen: dict[str, int] = {}
    for i, row in enumerate(rows):
        text = row.get(spec.text_field)
        if not isinstance(text, str):
            at = f"line {row[LINE]}" if LINE in row else f"row {i}"
            problem = f"corpus {where}, {at}: '{spec.text_field}' is {type(text).__name__}, not text"
            cannot_read(unreadable, f"{Path(where).name}:{row.get(LINE, i)}", problem)
            continue
        row.pop(LINE, None)
        doc_id = document_id(row, spec, i, where)
        if doc_id in seen:
            raise PipelineError(
                f"corpus {where}: duplicate document id '{doc_id}' (rows {seen[doc_id]} and {i}); "
                "ids must be unique"
            )
        seen[doc_id] = i
        check_unicode(doc_id, f"corpus {where}, row {i}: its id '{spec.id_field}'")
        check_unicode(text, f"corpus {where}, document '{doc_id}'")
        reference_tokens = int(row["tokenized_len"]) if selected else None
        docs.append(Document(id=doc_id, text=text, reference_tokens=reference_tokens))
    return docs


def document_id(row: dict[str, Any], spec: CorpusSpec, i: int, where: str) -> str:
    """Row ``i``'s id: its ``id_field`` (text or a whole number), else ``<name>-<row>``; a null, empty
    or other id is an error (a null would become the document "None")."""
    if not (spec.id_field and spec.id_field in row):
        return f"{spec.name}-{i:05d}"
    value = row[spec.id_field]
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        shown = "empty" if value == "" else "null" if value is None else type(value).__name__
        raise PipelineError(
            f"corpus {where}, row {i}: its document id '{spec.id_field}' is {shown}, not text or a whole "
            "number: give every row an id, or set corpus.id_field=null to number the rows"
        )
    return str(value)


def cannot_read(unreadable: Unreadable | None, row: str, problem: str) -> None:
    """A row that cannot be read: an error, or recorded in ``unreadable`` (``load_corpus``)."""
    if unreadable is None:
        raise PipelineError(problem)
    unreadable.append({"doc_id": row, "reason": f"cannot be read: {problem}"})


LINE = "\0line"  # a JSONL row's line number while it is read (``cannot_read`` names it)


def _jsonl_rows(path: Path, unreadable: Unreadable | None = None) -> list[dict[str, Any]]:
    rows = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            where = f"{path.name}:{number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                problem = f"{path}, line {number}: invalid UTF-8 at byte {exc.start}; fix the file's encoding"
                cannot_read(unreadable, where, problem)
                continue
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                cannot_read(unreadable, where, f"{path}, line {number}: not valid JSON ({exc.msg})")
                continue
            if not isinstance(row, dict):
                cannot_read(unreadable, where, f"{path}, line {number}: expected a JSON object per line")
                continue
            rows.append({**row, LINE: number} if unreadable is not None else row)
    return rows


def _parquet_rows(path: Path) -> list[dict[str, Any]]:
    try:
        return pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise PipelineError(
            f"corpus file {path} is not a readable Parquet file ({detail}): pass a Parquet or JSONL file"
        ) from None


def _dataset_rows(spec: CorpusSpec) -> list[dict[str, Any]]:
    """The rows of a Hub dataset (or a local copy of its files), or of a dataset saved with
    ``save_to_disk``."""
    import datasets

    saved = Path(spec.dataset)
    try:
        if (saved / "state.json").is_file() or (saved / "dataset_dict.json").is_file():
            data = datasets.load_from_disk(spec.dataset)
            data = data[spec.split] if isinstance(data, datasets.DatasetDict) else data
        else:
            data = datasets.load_dataset(spec.dataset, spec.config, split=spec.split, revision=spec.revision)
    except Exception as exc:  # datasets raises many types for a missing/unreachable dataset
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise PipelineError(
            f"could not load dataset '{spec.dataset}' (split '{spec.split}'): {detail}; if the Hub is "
            f"unreachable, run `hf download {spec.dataset} --repo-type dataset --local-dir DIR` on a "
            "connected machine and pass corpus.dataset=DIR, or save the texts as JSONL or Parquet and pass "
            "corpus=local corpus.path=<file>"
        ) from exc
    return data.to_list()


def decoded_rows(rows: list[dict[str, Any]], spec: CorpusSpec, where: str) -> list[dict[str, Any]]:
    """The rows that the selection keeps, each with its text decoded from the reference tokenizer's
    ids (tokenized here when the dataset holds plain texts)."""
    if not rows:
        raise PipelineError(f"corpus {where} has no rows: pass a dataset with texts in it")
    tokenizer = reference_tokenizer(spec, where)
    if "input_ids" not in rows[0]:
        rows = tokenized_rows(rows, spec, tokenizer, where)
    missing = {"input_ids", "tokenized_len"} - set(rows[0])
    if missing:
        raise PipelineError(f"corpus {where} is not pre-tokenized: no column {', '.join(sorted(missing))}")
    check_tokenized(rows, where)
    return [
        {**row, spec.text_field: tokenizer.batch_decode([row["input_ids"][: spec.max_ids]])[0]}
        for row in selected_rows(rows, spec, where)
    ]


def check_tokenized(rows: list[dict[str, Any]], where: str) -> None:
    """Every row's ``input_ids`` a list of token ids and its ``tokenized_len`` their number (the
    selection is made on it): a string of ids or a length that disagrees is an error, not trusted."""
    for i, row in enumerate(rows):
        ids, length = row.get("input_ids"), row.get("tokenized_len")
        if not isinstance(ids, (list, tuple)) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in ids
        ):
            raise PipelineError(
                f"corpus {where}, row {i}: input_ids is {type(ids).__name__}, not a list of token ids"
            )
        if isinstance(length, bool) or not isinstance(length, int) or length != len(ids):
            raise PipelineError(
                f"corpus {where}, row {i}: tokenized_len is {length!r} but input_ids holds {len(ids)} ids: "
                "fix tokenized_len (the selection is made on it)"
            )


def reference_tokenizer(spec: CorpusSpec, where: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(spec.tokenized_with, revision=spec.tokenizer_revision)
    except (OSError, ValueError) as exc:
        raise PipelineError(
            f"could not load the tokenizer '{spec.tokenized_with}' that decodes corpus {where}: on a "
            f"connected machine run `hf download {spec.tokenized_with} --local-dir DIR` and pass "
            "corpus.tokenized_with=DIR"
        ) from exc


def tokenized_rows(rows: list[dict[str, Any]], spec: CorpusSpec, tokenizer: Any, where: str) -> list[dict]:
    """Plain texts with their ids in the reference tokenizer (no special tokens) and their length."""
    if spec.text_field not in rows[0]:
        columns = ", ".join(sorted(rows[0]))
        raise PipelineError(
            f"corpus {where} has neither input_ids (pre-tokenized) nor a '{spec.text_field}' column to "
            f"tokenize (columns: {columns}): set corpus.text_field=<column>"
        )
    out = []
    for i, row in enumerate(tqdm(rows, desc=f"tokenizing {spec.name}", unit="text", disable=len(rows) < 10)):
        if not isinstance(row[spec.text_field], str):
            kind = "null" if row[spec.text_field] is None else type(row[spec.text_field]).__name__
            raise PipelineError(f"corpus {where}, row {i}: '{spec.text_field}' is {kind}, not text")
        ids = tokenizer(row[spec.text_field], add_special_tokens=False)["input_ids"]
        out.append({**row, "input_ids": ids, "tokenized_len": len(ids)})
    return out


def selected_rows(rows: list[dict[str, Any]], spec: CorpusSpec, where: str) -> list[dict[str, Any]]:
    """The first ``limit`` rows of at least ``min_tokenized_len`` tokens; with ``too_few=longest`` and
    fewer such rows, the ``limit`` longest rows, in the dataset's order. Says what it kept."""
    long_enough = [row for row in rows if row["tokenized_len"] >= spec.min_tokenized_len]
    if spec.limit is None or len(long_enough) >= spec.limit or spec.too_few == "keep":
        kept = long_enough[: spec.limit]
        if spec.limit is not None and len(kept) < spec.limit:
            print(
                f"corpus {spec.name}: only {len(kept)} of {len(rows)} texts in {where} have at least "
                f"{spec.min_tokenized_len} reference tokens (limit={spec.limit}); kept those"
            )
        return kept
    longest = sorted(range(len(rows)), key=lambda i: (-rows[i]["tokenized_len"], i))[: spec.limit]
    kept = [rows[i] for i in sorted(longest)]
    shortest = min(row["tokenized_len"] for row in kept)
    print(
        f"corpus {spec.name}: only {len(long_enough)} of {len(rows)} texts in {where} have at least "
        f"{spec.min_tokenized_len} reference tokens; too_few=longest: kept the {len(kept)} longest "
        f"(the shortest has {shortest}; each document records its length)"
    )
    return kept
