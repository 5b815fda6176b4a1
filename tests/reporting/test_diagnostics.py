"""Each document's diagnostics in `make keytokens`'s summary, on its key-token page and in the index: the
values of ``pipeline.artifact.columns.document_columns`` (what `make curate` writes) for that document's
rows of the artifact's tokens table, by the artifact's own alpha, beta and gamma, in fixed formats.
On 2e5eb6c neither the summary nor the pages showed them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.artifact.columns import document_columns
from pipeline.artifact.reader import load_artifact
from pipeline.artifact.statistics import statistics
from pipeline.definition import KeyTokenDefinition
from pipeline.jobs.keytokens import KeyTokensRun
from pipeline.reporting import diagnostics, keytoken_page
from pipeline.reporting.keytokens import summary

SUMMARY = (
    "longppl_key_ratio",
    "longppl_lsd_p50",
    "longppl_lsd_p90",
    "longppl_lsd_p99",
    "longppl_mean_positive_lsd",
)


def expected_columns(root: Path) -> dict[str, dict]:
    """document_columns of each document, from tokens.parquet and manifest.json read directly."""
    settings = json.loads((root / "manifest.json").read_text())["settings"]
    rule = KeyTokenDefinition(alpha=settings["alpha"], beta=settings["beta"], gamma=settings["gamma"])
    tokens = pq.read_table(root / "tokens.parquet")
    out = {}
    for doc_id in pq.read_table(root / "documents.parquet")["doc_id"].to_pylist():
        rows = tokens.filter(pc.equal(tokens["doc_id"], doc_id))
        long, short = (rows[n].to_numpy(zero_copy_only=False) for n in ("long_logprob", "short_logprob"))
        out[doc_id] = document_columns(long, short, rule)
    return out


def formatted(c: dict, names: tuple[str, ...]) -> list[str]:
    """The values as the summary and the pages write them: ratios in percent, LSD in nats."""
    specs = {"longppl_key_ratio": ".2%", "longppl_scored_tokens": "d"}
    mean_lsd = {n for n in c if n.startswith("longppl_mean_positive_lsd")}
    return [format(c[n], specs.get(n, ".4f" if n in mean_lsd else ".3f")) for n in names]


def test_the_summary_shows_each_documents_columns(tiny_artifact):
    expected = expected_columns(tiny_artifact)
    assert len(expected) == 3 and all(c["longppl_scored_tokens"] > 0 for c in expected.values())
    art = load_artifact(tiny_artifact)
    done = KeyTokensRun(art.manifest, tiny_artifact, 1.0, 0.5, artifact=art, statistics=statistics(art))
    done.views = tiny_artifact / "views" / "index.html"
    lines = summary(done).splitlines()
    table = [line.split() for line in lines if line.startswith("diagnostics ")]
    assert table[0] == ["diagnostics", "document", "key", "ratio", "LSD", "p50", "LSD", "p90", "LSD", "p99",
                        "mean", "LSD+"]  # fmt: skip
    assert table[1:] == [["diagnostics", doc, *formatted(c, SUMMARY)] for doc, c in expected.items()]
    assert lines.index(next(x for x in lines if x.startswith("LSD "))) + 1 == lines.index(
        next(x for x in lines if x.startswith("diagnostics "))
    )  # right under the corpus's LSD line


def test_many_documents_show_the_spread_and_ids_are_escaped(tiny_artifact):
    rows = list(expected_columns(tiny_artifact).values())
    few = {"doc\x1b[2J": rows[0]}
    assert "doc\\x1b[2J" in diagnostics.summary_lines(few)[1] and "\x1b" not in "".join(
        diagnostics.summary_lines(few)
    )
    assert diagnostics.summary_lines({}) == []
    many = {f"d{i}": rows[i % 3] for i in range(diagnostics.TABLE_DOCUMENTS + 1)}
    lines = diagnostics.summary_lines(many)
    assert lines[0].startswith(f"diagnostics {len(many)} documents: each column's min, median and max")
    for line, name in zip(lines[1:], SUMMARY, strict=True):
        values = [row[name] for row in many.values()]
        spread = [np.min(values), np.median(values), np.max(values)]
        numbers = [formatted({name: v}, (name,))[0] for v in spread]
        assert line.endswith(f"min {numbers[0]}, median {numbers[1]}, max {numbers[2]}"), line


def test_each_page_and_the_index_show_each_documents_columns(tiny_artifact, tmp_path):
    expected = expected_columns(tiny_artifact)
    art = load_artifact(tiny_artifact)
    names = tuple(diagnostics.SHOWN)
    assert set(names) == set(expected["doc-0"]) - {"longppl_tokens", "longppl_key_tokens"}
    for doc_id, c in expected.items():
        page = keytoken_page.document_html(art, doc_id)
        (table,) = re.findall(r'<table class="diagnostics">(.*?)</table>', page)
        assert re.findall(r"<td>(.*?)</td>", table) == formatted(c, names)
    index = keytoken_page.index_html(art, set())
    for doc_id, c in expected.items():
        (row,) = re.findall(rf"<tr><td>{doc_id}</td>(.*?)</tr>", index)
        assert re.findall(r"<td>(.*?)</td>", row)[-2:] == formatted(
            c, ("longppl_key_ratio", "longppl_mean_positive_lsd")
        )
    assert '<th title="key tokens / scored tokens">key ratio</th>' in index
