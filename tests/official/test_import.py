"""Importing the paper's key spans (`make import-official`), offline, from sources shaped like the real
ones: a pre-tokenized dataset saved with `datasets`, the tokenizer that decodes it, an evaluator
tokenizer, and span files written by the official package's own `find_key_token`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.artifact.reader import load_artifact
from pipeline.artifact.schema import KEY_SPANS
from pipeline.commands.import_official import run as import_official
from pipeline.errors import PipelineError
from pipeline.official.span_files import merge_overlaps, parse_spans, read_span_folder
from pipeline.score.sums import official_aggregate, official_aggregate_before_a7082c3
from tests.support import OFFICIAL_SHORT as SHORT
from tests.support import OFFICIAL_TEXTS as TEXTS
from tests.support import ROOT, compose_config, decoded_corpus, import_overrides, save_dataset


def run_import(src: dict, out: Path, *extra: str) -> dict:
    return import_official(compose_config("import_official", import_overrides(src, out, *extra)))


def test_imported_artifact_passes_the_check_and_scores_as_the_official_package(
    sources, tiny_model_dir, tmp_path
):
    from longppl.longppl import compute_longppl
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipeline.commands.score import run as score

    manifest = run_import(sources, tmp_path)
    art = load_artifact(tmp_path / "govreport_paper--official--Tiny-Evaluator")
    assert manifest["kind"] == art.kind == KEY_SPANS and art.tokens is None and not art.has_token_values
    assert manifest["boundary_check"]["share"] == 1.0 and manifest["boundary_check"]["spans"] > 10
    assert manifest["merged_overlapping_spans"] > 0  # byte tokens of one character: merged
    settings = art.settings
    assert settings["source"]["repository"] == "PKU-ML/LongPPL"
    assert settings["source"]["commit"] == "1decd2a70d9ee78488adea49c088f8bc472f4938"
    assert settings["corpus"]["dataset"]["path"] == str(sources["dataset"].resolve())
    assert (
        len(settings["corpus"]["dataset"]["sha256"])
        == len(settings["evaluator"]["tokenizer"]["sha256"])
        == 64
    )
    assert settings["evaluator"]["spec"] == "tiny/evaluator" and settings["gamma"] is None
    docs = decoded_corpus(sources["dataset"], sources["decoder"])
    assert art.texts() == {d.id: d.text for d in docs}
    assert run_import(sources, tmp_path) == manifest  # the same inputs again: untouched

    cfg = compose_config(
        "score",
        [
            "model=local",
            f"model.spec={tiny_model_dir}",
            f"artifact={art.root}",
            f"results={tmp_path / 'scores.jsonl'}",
            "add_bos=false",
            "dtype=float64",
            "device=cpu",
            "progress=false",
        ],
    )
    row = score(cfg)
    assert row["corpus"]["longppl_soft"] is None and row["corpus"]["grid"] == {}
    assert "per-token LSD" in row["corpus"]["unavailable"]["longppl_soft"]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    model_tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    official = [
        compute_longppl(
            doc.text, model, None, model_tokenizer, save_path=str(sources["spans"] / f"slice_{i}.txt")
        )
        for i, doc in enumerate(docs)
    ]
    assert sum(o["n_key_token"] or 0 for o in official) > 5
    rel = [
        abs(ours[m] / float(theirs[m]) - 1)
        for ours, theirs in zip(row["documents"], official, strict=True)
        for m in ("ppl", "longppl")
        if theirs[m] is not None
    ]
    print(f"largest relative difference to the official package: {max(rel):.1e} over {len(rel)} values")
    for ours, theirs in zip(row["documents"], official, strict=True):
        assert ours["ppl"] == pytest.approx(float(theirs["ppl"]), rel=1e-4)
        assert ours["n_key_tokens"] == (theirs["n_key_token"] or 0) and ours["n_tokens"] == theirs["n_token"]
        if theirs["longppl"] is not None:
            assert ours["longppl"] == pytest.approx(float(theirs["longppl"]), rel=1e-4)
    # the corpus values as the official perplexity.py combines them (since a7082c3), from its own outputs
    theirs = perplexity_py(official)
    assert official_aggregate(as_documents(official)) == pytest.approx(theirs, rel=1e-6)
    assert official_aggregate(row["documents"]) == pytest.approx(theirs, rel=1e-4)
    older = official_aggregate_before_a7082c3(row["documents"])
    assert all(older[m] > theirs[m] * 1.001 for m in theirs)  # the older arithmetic mean: not the same
    refresh_against(theirs, art.root, tiny_model_dir, tmp_path, "official")  # passes within 1e-4
    with pytest.raises(PipelineError, match=r"tiny: ppl is .* now, expected .*relative tolerance 0\.0001"):
        refresh_against(theirs, art.root, tiny_model_dir, tmp_path, "official_before_a7082c3")


def perplexity_py(outputs: list[dict]) -> dict[str, float]:
    """The official perplexity.py's corpus values from compute_longppl's outputs, as its code does them
    since commit a7082c3: per-document values (float32) combined in log space with weights n_token
    (PPL) and n_key_token (LongPPL); a document without key tokens is left out of LongPPL only."""
    keyed = [o for o in outputs if o["longppl"] is not None]
    out = {}
    for metric, weight, rows in (("ppl", "n_token", outputs), ("longppl", "n_key_token", keyed)):
        values = np.stack([o[metric] for o in rows])
        weights = np.stack([o[weight] for o in rows])
        out[metric] = float(np.exp((np.log(values) * weights).sum() / weights.sum()))
    return out


def as_documents(outputs: list[dict]) -> list[dict]:
    """compute_longppl's outputs as the per-document values of a results line."""
    return [
        {
            "ppl": float(o["ppl"]),
            "n_tokens": o["n_token"],
            "longppl": None if o["longppl"] is None else float(o["longppl"]),
            "n_key_tokens": o["n_key_token"] or 0,
        }
        for o in outputs
    ]


def refresh_against(expected: dict, artifact: Path, model: Path, tmp_path: Path, aggregate: str) -> None:
    """A refresh of ``model`` on ``artifact`` against ``expected`` values under ``aggregate``."""
    from pipeline.commands import leaderboard_refresh as refresh_command

    values = ", ".join(f"{k}: {v!r}" for k, v in expected.items())
    pinned = f"{{name: tiny, spec: '{model}', revision: null, expected: {{{values}}}}}"
    overrides = [f"artifact={artifact}", "fingerprint=null", "contents=null", "discrete=null"]
    overrides += [f"recorded={tmp_path / 'none.jsonl'}"]
    overrides += [f"models=[{pinned}]", f"aggregate={aggregate}", "tolerance=1e-4", f"work_dir={tmp_path}"]
    overrides += ["settings.add_bos=false", "settings.dtype=float64", "settings.device=cpu"]
    refresh_command.run(compose_config("leaderboard_refresh", overrides))


def test_a_shifted_text_fails_the_boundary_check(sources, tokenizer, tmp_path):
    shifted = save_dataset(
        tmp_path / "shifted", tokenizer, [TEXTS[0], SHORT, TEXTS[1], TEXTS[2]], prefix="Note: "
    )
    src = {**sources, "dataset": shifted}
    with pytest.raises(PipelineError) as info:
        run_import(src, tmp_path)
    message = str(info.value)
    print(message)
    assert "below the threshold of 99%" in message and "token boundaries" in message
    assert "fit when moved by +6 characters" in message and "6 characters more before them" in message
    assert "\n" not in message


def spans_with(sources, tmp_path, name: str, content: str):
    """A copy of the span files with ``name`` holding ``content``."""
    spans = tmp_path / "spans"
    spans.mkdir()
    for path in sources["spans"].iterdir():
        (spans / path.name).write_text(path.read_text())
    (spans / name).write_text(content)
    return spans


def test_a_span_past_the_end_of_its_text(sources, tmp_path):
    spans = spans_with(sources, tmp_path, "slice_1.txt", "[10, 20];[100000, 100005]")
    with pytest.raises(
        PipelineError, match=r"slice_1\.txt: span \[100000, 100005\] ends past the end of document"
    ):
        run_import({**sources, "spans": spans}, tmp_path)


def test_a_document_count_that_does_not_match(sources, tmp_path):
    spans = spans_with(sources, tmp_path, "slice_3.txt", "[10, 20]")
    with pytest.raises(
        PipelineError, match="has span files for 4 documents, corpus 'govreport_paper' gives 3"
    ):
        run_import({**sources, "spans": spans}, tmp_path)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[1, 2];[3, x]", r"span 2 is '\[3, x\]', not '\[start, end\]' with two integers"),
        ("__import__('os').system('true')", "span 1 is .* not '\\[start, end\\]'"),
        ("[1, 2, 3]", "not '\\[start, end\\]'"),
        ("[-1, 5]", r"span 1 \[-1, 5\] is negative"),
        ("[9, 3]", r"span 1 \[9, 3\] is reversed"),
        ("[5, 8];[1, 3]", r"span 2 \[1, 3\] starts before the previous one \(5\): spans must be sorted"),
        ("[1, 5]\n[6, 8]", "expected one line of spans, found 2 lines"),
    ],
)
def test_span_files_are_parsed_as_numbers_only(text, problem):
    with pytest.raises(PipelineError, match=problem):
        parse_spans(text, "slice_0.txt")


def test_span_file_format():
    assert parse_spans("[40349, 40350];[40351, 40358]").tolist() == [[40349, 40350], [40351, 40358]]
    assert parse_spans("").shape == (0, 2) and parse_spans("[3, 9]\n").tolist() == [[3, 9]]
    # byte tokens sharing a character give overlapping intervals in the official files: kept, then merged
    overlapping = parse_spans("[107, 108];[107, 109];[120, 121]")
    merged, n = merge_overlaps(overlapping)
    assert merged.tolist() == [[107, 109], [120, 121]] and n == 1


def test_a_missing_span_file(tmp_path):
    (tmp_path / "slice_0.txt").write_text("[1, 2]")
    (tmp_path / "slice_2.txt").write_text("[1, 2]")
    with pytest.raises(PipelineError, match=r"span files of documents \[1\] are missing"):
        read_span_folder(tmp_path)


def test_the_shipped_span_files_parse():
    """The three real evaluators' files: 2965, 2411 and 2705 spans over 50 documents each."""
    counts = {}
    for folder in ("Meta-Llama-3.1-8B", "Mistral-Large-Instruct-2407", "Qwen2-72B-Instruct"):
        spans = read_span_folder(ROOT / "data/official-key-text" / folder)
        counts[folder] = (len(spans), sum(len(s) for s in spans))
        assert all(np.all(s[:, 1] > s[:, 0]) for s in spans)
    assert counts == {
        "Meta-Llama-3.1-8B": (50, 2965),
        "Mistral-Large-Instruct-2407": (50, 2411),
        "Qwen2-72B-Instruct": (50, 2705),
    }


def test_hub_unreachable_names_the_local_fallback(tmp_path):
    """The default sources are on the Hub; offline, the command fails at once with one line."""
    cmd = [
        sys.executable,
        "-m",
        "pipeline.commands.import_official",
        "official=qwen2-72b-instruct",
        f"output_dir={tmp_path}",
    ]
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "HOME": str(Path.home())}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: could not reach 'emozilla/govreport-test-tokenized'")
    assert "hf download emozilla/govreport-test-tokenized --repo-type dataset --local-dir DIR" in lines[0]
    assert "pass corpus.dataset=DIR" in lines[0]
