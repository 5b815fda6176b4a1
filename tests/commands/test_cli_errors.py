"""Bad inputs through the command-line entry points, as a user meets them: one ``error:`` line per
failure, exit status 2, never a traceback (damaged artifacts and tables, stage-1 settings and corpora,
results out of range, hostile names, a damaged import). Each command runs once, as a Hydra multirun
over its bad inputs (a failing job does not stop the others), so the suite stays short. The helpers
here (``cli``, ``run_cli``, ``error_lines``, ``messages``, ``one_error``) run a command and read its
error lines for the other test files."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.artifact.reader import load_artifact
from pipeline.provenance import file_sha256
from tests.support import ARTIFACT_DAMAGES as CASES
from tests.support import cli, craft, error_lines, import_overrides, keytokens_overrides


def score_each(roots: dict, messages: dict, model_dir, tmp_path) -> list[str]:
    """The score stage as one multirun over the artifacts ``roots`` (case -> directory): one error line
    per case, matching its message; no number produced. Returns the error lines."""
    done = cli(
        "pipeline.commands.score",
        "--multirun",
        "model=local",
        f"model.spec={model_dir}",
        "artifact=" + ",".join(str(r) for r in roots.values()),
        f"results={tmp_path / 'scores.jsonl'}",
        "device=cpu",
        "progress=false",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    lines = error_lines(done.stderr)
    assert len(lines) == len(roots)
    for case, message in messages.items():
        line = next(line for line in lines if f"artifact={roots[case]}," in line)
        assert re.search(message, line), (case, line)
    assert not (tmp_path / "scores.jsonl").exists()  # no number was produced
    assert any(line.startswith("error: multirun job failed [artifact=") for line in done.stderr.splitlines())
    return lines


def test_score_on_every_damaged_artifact(tiny_artifact, other_model_dir, tmp_path):
    roots = {case: craft(tiny_artifact, tmp_path / case, **edits) for case, (edits, _) in CASES.items()}
    score_each(roots, {case: message for case, (_, message) in CASES.items()}, other_model_dir, tmp_path)


def test_keytokens_settings_are_checked_before_any_model_loads(tiny_model_dir, tmp_path):
    """Every job has one bad setting (the first in field order is reported); the evaluator is a
    path that does not exist, so a job that got past the settings would fail differently."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "a", "text": "some text"}) + "\n")
    base = keytokens_overrides(tmp_path / "no-model", corpus, tmp_path / "out")
    sweep = ["K=0,16", "d=-1,8", "alpha=nan,0.5", "beta=inf,-30", "gamma=0,5", "num_documents=0"]
    keep = [o for o in base if o.split("=")[0] not in {s.split("=")[0] for s in sweep}]
    done = cli(
        "pipeline.commands.keytokens", "--multirun", *keep, *sweep, f"hydra.sweep.dir={tmp_path / 'sweep'}"
    )
    messages = {line.split("] ", 1)[1] for line in error_lines(done.stderr)}
    assert messages == {
        "setting K=0: Input should be greater than 0",
        "setting d=-1: Input should be greater than 0",
        "setting alpha=nan: Input should be a finite number",
        "setting beta=inf: Input should be a finite number",
        "setting gamma=0: Input should be greater than 0",
        "setting num_documents=0: Input should be greater than 0",
    }
    assert not (tmp_path / "out").exists()


def test_keytokens_corpus_that_cannot_be_scored(tiny_model_dir, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    base = [o for o in keytokens_overrides(tiny_model_dir, "x", tmp_path / "out") if "corpus.path" not in o]
    done = cli(
        "pipeline.commands.keytokens",
        "--multirun",
        *base,
        f"corpus.path={tmp_path},{empty}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    messages = sorted(line.split("] ", 1)[1] for line in error_lines(done.stderr))
    assert messages == [
        "corpus 'local' has no documents: nothing to score",
        f"corpus.path={tmp_path} is a directory: pass a .jsonl or .parquet file",
    ]


def result_line(**corpus) -> str:
    values = {"ppl": 12.0, "longppl": 6.0, "longppl_soft": 11.0, "n_tokens": 100, "n_key_tokens": 5, **corpus}
    row = {
        "model_name": "m",
        "artifact": {"name": "a", "fingerprint": "f" * 64},
        "corpus": values,
        "date": "2026-11-22T00:00:00+00:00",
    }
    return json.dumps(row)  # allow_nan: the file is made by hand here


def test_leaderboard_rejects_values_out_of_range(tmp_path):
    bad = {
        "huge": (
            result_line(n_tokens=10**30),
            r"`corpus\.n_tokens` is 1000000000000000000000000000000: a count",
        ),
        "nan": (result_line(ppl=float("nan")), r"`corpus\.ppl` is nan, not a finite number"),
        "negative": (result_line(longppl=-4.0), r"`corpus\.longppl` is -4\.0: a perplexity is at least 1"),
        "infinite": (result_line(longppl_soft=float("inf")), r"`corpus\.longppl_soft` is inf, not a finite"),
        "coverage": (result_line(key_char_coverage=1.5), r"`corpus\.key_char_coverage` is 1\.5: a fraction"),
    }
    paths = []
    for name, (line, _) in bad.items():
        paths.append(tmp_path / f"{name}.jsonl")
        paths[-1].write_text(line + "\n")
    done = cli(
        "pipeline.commands.leaderboard",
        "--multirun",
        "results=" + ",".join(str(p) for p in paths),
        f"out_dir={tmp_path / 'out'}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    lines = error_lines(done.stderr)
    for name, (_, message) in bad.items():
        line = next(line for line in lines if f"{name}.jsonl" in line)
        assert re.search(r"line 1 is not a valid result \(" + message, line), line
    assert not (tmp_path / "out").exists()


def test_publish_and_show_on_hostile_names(tiny_artifact, tmp_path):
    done = cli(
        "pipeline.commands.publish",
        "--multirun",
        f"artifact={tiny_artifact}",
        "repo='org/na`me','org/a b',org",
        "dry_run=true",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    lines = error_lines(done.stderr)
    assert len(lines) == 3 and all("is not a Hub dataset id" in line for line in lines)
    missing = cli(
        "pipeline.commands.show",
        f"artifact={tiny_artifact}",
        "doc_id=nope",
        f"hydra.run.dir={tmp_path / 'logs'}",
    )
    assert missing.stderr.startswith("error: no document 'nope'") and missing.stderr.count("\n") == 1


def rehashed(root, name: str):
    """The manifest's record of ``name`` redone after its bytes were changed."""
    record = json.loads((root / "manifest.json").read_text())
    path = root / f"{name}.parquet"
    record["files"][path.name]["sha256"] = file_sha256(path)
    (root / "manifest.json").write_text(json.dumps(record))
    return root


def with_table(src, dst, name: str, change):
    """A copy of ``src`` whose table ``name`` is ``change(table)`` (a pyarrow table, or bytes)."""
    root = craft(src, dst)
    found = change(pq.read_table(root / f"{name}.parquet"))
    if isinstance(found, bytes):
        (root / f"{name}.parquet").write_bytes(found)
    else:
        pq.write_table(found, root / f"{name}.parquet")
    return rehashed(root, name)


def invalid_utf8(table: pa.Table) -> pa.Table:
    texts = [t.encode() for t in table["text"].to_pylist()]
    data = bytearray(b"".join(texts))
    data[5] = 0xFF
    offsets = pa.py_buffer(np.cumsum([0, *map(len, texts)]).astype(np.int64).tobytes())
    bad = pa.LargeStringArray.from_buffers(len(texts), offsets, pa.py_buffer(bytes(data)))
    return table.set_column(table.schema.get_field_index("text"), "text", bad)


TABLE_CASES = {
    "not_parquet": (
        "spans",
        lambda t: b"PAR1 not a table",
        r"spans\.parquet is not a readable Parquet file \(",
    ),
    "invalid_utf8": ("documents", invalid_utf8, r"documents\.parquet: column text holds invalid UTF-8"),
    "extra_column": (
        "spans",
        lambda t: t.append_column("x", pa.array([1] * t.num_rows)),
        r"spans\.parquet does not have the schema of version 1: an extra column 'x'",
    ),
    "wrong_dtype": (
        "spans",
        lambda t: t.set_column(3, "char_end", t["char_end"].cast(pa.int64())),
        r"spans\.parquet does not have the schema of version 1: column char_end is int64, not int32",
    ),
}


def test_score_on_damaged_tables(tiny_artifact, other_model_dir, tmp_path):
    roots = {
        case: with_table(tiny_artifact, tmp_path / case, n, f) for case, (n, f, _) in TABLE_CASES.items()
    }
    messages = {case: message for case, (_, _, message) in TABLE_CASES.items()}
    lines = score_each(roots, messages, other_model_dir, tmp_path)
    assert all(len(line.split("] ", 1)[1]) < 300 for line in lines)  # short: no text quoted


def test_import_official_on_a_damaged_manifest_and_a_huge_span(sources, tmp_path):
    """A cut manifest where the import writes: imported anew (as its error advises). A span file with a
    number past any character offset: one error line."""
    root = tmp_path / "out" / "govreport_paper--official--Tiny-Evaluator"
    root.mkdir(parents=True)
    (root / "manifest.json").write_text('{"schema_version": 1, "fingerp')
    huge = tmp_path / "huge"
    shutil.copytree(sources["spans"], huge)
    (huge / "slice_1.txt").write_text("[10, 20];[30, 99999999999999999999999999]")
    overrides = [o for o in import_overrides(sources, tmp_path / "out") if not o.startswith("spans_dir")]
    done = cli(
        "pipeline.commands.import_official", "--multirun", *overrides, f"spans_dir={huge},{sources['spans']}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )  # fmt: skip
    lines = error_lines(done.stderr)
    assert len(lines) == 1 and re.search(
        r"slice_1\.txt: span 2 is '\[30, 99999999999999999999999999\]': a number past 2147483647", lines[0]
    )
    assert "note: the artifact there does not load, so it is imported anew" in done.stdout
    assert load_artifact(root).kind == "key_spans"
