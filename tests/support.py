"""What more than one test module uses: the tiny models and their texts, the commands composed and
run as `make` runs them, artifacts damaged on purpose, results lines, the official implementation's
inputs, a tiny LooGLE folder, direct computations and the pipeline's layers. The only module the test
modules share (``tests/conftest.py`` builds its fixtures on it; no test module imports another)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from pipeline import definition
from pipeline.artifact import schema
from pipeline.artifact.schema import TABLES, settings_fingerprint
from pipeline.commands.forgetting_curve import run as forgetting_run
from pipeline.commands.ladder import run as run_ladder
from pipeline.commands.score import run as run_score
from pipeline.commands.shell import FORGETTING_CONF, compose
from pipeline.files import write_table_atomic
from pipeline.provenance import file_sha256, text_sha256
from pipeline.text.corpus import CorpusSpec, load_corpus
from studies.random_models import random_model, tiny_config


class _Polars:
    """polars, imported where a table is built (the GPU machines' tests run without it)."""

    def __getattr__(self, name: str) -> Any:
        import polars

        return getattr(polars, name)


pl = _Polars()

ROOT = Path(__file__).resolve().parents[1]

# ----------------------------------------------------------------------------------------------
# Texts: the tiny tokenizer's training text, and the tiny key-token artifact's documents


TRAINING_TEXT = [
    "Federal law provides a variety of powers for the President to use in response to crisis.",
    "The Congressional Research Service reports on appropriations, emergencies and statutes.",
    "line 1: REGISTER_CONTENT is 4512. line 2: REGISTER_CONTENT is 2290.",
    "Unicode: café, naïve, 中文字符, emoji 😀👩‍👩‍👧, e\u0301, CRLF\r\n and tabs\t.",
] * 4


STAGE1_TEXTS = [
    "The committee reported the bill. " * 12 + "line 7: REGISTER_CONTENT is 4512. " * 4,
    "Emoji 😀👩‍👩‍👧 and 中文字符 with e\u0301 and CRLF\r\nand a NUL \x00 byte. " * 6,
    "Federal law provides a variety of powers for the President. " * 10,
]


# ----------------------------------------------------------------------------------------------
# Tiny random-weight models with a real (tiny, trained) tokenizer, built from configs


def build_tokenizer(vocab_size: int = 400, normalizer=None):
    """A byte-level BPE tokenizer trained in milliseconds; handles any text via bytes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if normalizer is not None:
        tok.normalizer = normalizer
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<bos>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(TRAINING_TEXT, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>")


def build_model(arch: str, vocab_size: int, max_positions: int = 1024, seed: int = 0):
    """The tiny random model of ``arch`` in float64 on blocked_sdpa, its weights x8: log-probs that
    depend strongly on the context."""
    import torch

    from pipeline.models import attention

    config = tiny_config(arch, vocab_size, max_positions)
    attn = attention.ALIAS if arch == "gemma2" else attention.NAME
    return random_model(config, seed=seed, dtype=torch.float64, scale=8.0, attn=attn)


def save_tiny_model(
    path: Path, tokenizer, arch: str = "llama", max_positions: int = 512, seed: int = 0
) -> Path:
    build_model(arch, len(tokenizer), max_positions=max_positions, seed=seed).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


# ----------------------------------------------------------------------------------------------
# Commands composed from conf/ and run in this process, on the tiny models


def compose_config(name: str, overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return compose(name, overrides=overrides)


def compose_keytokens(overrides: list[str]):
    return compose_config("keytokens", overrides)


def run_keytokens(cfg) -> dict:
    """The keytokens command on a composed config, as `make keytokens` runs it (the run, its summary
    and pages); returns the manifest."""
    from pipeline.commands.keytokens import run

    return run(cfg)


def keytokens_overrides(model_dir, corpus, out, *extra) -> list[str]:
    return [
        "evaluator=local",
        f"evaluator.spec={model_dir}",
        "corpus=local",
        f"corpus.path={corpus}",
        f"output_dir={out}",
        "name=test",
        "K=16",
        "d=8",
        "max_tokens=150",
        "dtype=float64",
        "device=cpu",
        "alpha=0.5",
        "beta=-30",
        "progress=false",
        "head_chunk=16",
        *extra,
    ]


def score(model_dir, artifact, tmp_path, *extra):
    cfg = compose_config(
        "score",
        [
            "model=local",
            f"model.spec={model_dir}",
            f"artifact={artifact}",
            f"results={tmp_path}/scores.jsonl",
            "dtype=float64",
            "device=cpu",
            "progress=false",
            "head_chunk=16",
            *extra,
        ],
    )
    return run_score(cfg)


# a command's model and compute settings for the tiny models (float64 on the CPU, no progress bars)
TINY_RUN = ["model=local", "dtype=float64", "device=cpu", "progress=false", "head_chunk=16"]


def ladder(model_dir, artifact, tmp_path, *extra):
    return run_ladder(
        compose_config(
            "ladder",
            [*TINY_RUN, f"model.spec={model_dir}", f"artifact={artifact}", f"results={tmp_path}/ladder.jsonl",
             f"plot_dir={tmp_path}/plots", "bootstrap=200", *extra],
        )
    )  # fmt: skip


def forgetting_overrides(model_dir, corpus, out: Path, *extra) -> list[str]:
    return [
        "model=local",
        f"model.spec={model_dir}",
        "corpus=local",
        f"corpus.path={corpus}",
        f"results={out / 'forgetting.jsonl'}",
        f"plot_dir={out}",
        "dtype=float64",
        "device=cpu",
        "progress=false",
        "grid=linear",
        "n=2",
        "R=2",
        "max_length=21",
        *extra,
    ]


def run_forgetting(model_dir, corpus, out, *extra) -> dict:
    return forgetting_run(compose_forgetting(forgetting_overrides(model_dir, corpus, out, *extra)))


def compose_forgetting(overrides: list[str]):
    return compose("forgetting", overrides, config_dir=FORGETTING_CONF)


def validate_config(tmp_path, *overrides):
    return compose_config(
        "validate",
        [
            f"work_dir={tmp_path / 'work'}",
            f"docs_dir={tmp_path / 'docs'}",
            f"report={tmp_path / 'validation.md'}",
            "dtype=float64",
            "device=cpu",
            "head_chunk=16",
            "progress=false",
            *overrides,
        ],
    )


# compute settings other than the defaults: each must reach the loads and scorers (check_compute_reached)
COMPUTE = {"head_chunk": 7, "vocab_tile": 123, "window_batch_tokens": 321, "head_dtype": "float32"}


def check_compute_reached(spy: dict, loads: int = 1, device: str = "cpu") -> None:
    """Each load had the dtype, device and cache; each scorer (but the like-with-like one of the guard,
    whose head dtype is the logits') the blocks and batches; the head dtype setting was resolved."""
    assert len(spy["loads"]) >= loads
    for kwargs in spy["loads"]:
        assert (kwargs["dtype"], kwargs["device"], kwargs["cache_dir"]) == (
            "float64",
            device,
            spy["cache_dir"],
        )
    assert spy["scorers"]
    for scorer in spy["scorers"]:
        assert (scorer.head_chunk, scorer.vocab_tile, scorer.window_batch_tokens) == (7, 123, 321)
    assert spy["head_dtypes"] and set(spy["head_dtypes"]) == {"float32"}


# ----------------------------------------------------------------------------------------------
# Commands in a child process, as a user runs them


def cli(module: str, *args: str, check_rc: int | None = 2) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    if check_rc is not None:
        assert done.returncode == check_rc, done.stderr[-3000:]
    return done


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: [")]


def run_cli(module: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, env=environment, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip


def one_error(done: subprocess.CompletedProcess) -> str:
    """The one ``error:`` line of a command that failed cleanly (exit status 2, no traceback)."""
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("error: ")]
    return line


def messages(stderr: str) -> dict[frozenset[str], str]:
    """Each multirun job's error message by its overrides (Hydra's ``a=1,b=2``, as a set)."""
    jobs = (line.removeprefix("error: [").split("] ", 1) for line in error_lines(stderr))
    return {frozenset(overrides.split(",")): message for overrides, message in jobs}


def job(found: dict[frozenset[str], str], *overrides: str) -> str:
    """The message of the one job that has all these overrides."""
    (message,) = [m for job, m in found.items() if job >= set(overrides)]
    return message


# the words of the corpus that stage 1 runs on across processes
DISTRIBUTED_WORDS = [
    "federal",
    "law",
    "provides",
    "powers",
    "president",
    "congress",
    "emergency",
    "report",
    "statute",
]


def table_bytes(root) -> dict[str, bytes]:
    return {name: (root / f"{name}.parquet").read_bytes() for name in schema.TABLES}


def keytokens_command(model_dir, corpus, out, *extra: str) -> list[str]:
    """`make keytokens` on the tiny model as a user runs it (its own process); ``extra``: more overrides
    (``tasks=4``, ``workers=2``, ``executor=slurm``, ...)."""
    args = [
        *keytokens_overrides(model_dir, corpus, out, "max_tokens=400", *extra),
        "hydra.run.dir=" + str(out / "logs"),
    ]
    return [sys.executable, "-m", "pipeline.commands.keytokens", *args]


def run_cmd(cmd, **kwargs):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, **kwargs)


# ----------------------------------------------------------------------------------------------
# Artifacts edited as an adversary would (every hash recomputed)


Edit = Callable[[Any], Any]  # a polars frame in, a polars frame out


def craft(
    src: Path,
    dst: Path,
    *,
    documents: Edit | None = None,
    tokens: Edit | None = None,
    spans: Edit | None = None,
    manifest: Callable[[dict], None] | None = None,
) -> Path:
    """A copy of ``src`` with tables edited and every file hash (and row count) in the manifest redone."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("views"))
    record = json.loads((dst / "manifest.json").read_text())
    for name, edit in (("documents", documents), ("tokens", tokens), ("spans", spans)):
        if edit is None:
            continue
        path = dst / f"{name}.parquet"
        table = edit(pl.read_parquet(path)).to_arrow().cast(schema.TABLES[name])
        write_table_atomic(path, table)
        record["files"][path.name] = {
            "sha256": file_sha256(path),
            "bytes": path.stat().st_size,
            "rows": len(table),
        }
    if manifest is not None:
        manifest(record)
    (dst / "manifest.json").write_text(json.dumps(record))
    return dst


def cell(column: str, row: int, value) -> Edit:
    def edit(df: pl.DataFrame) -> pl.DataFrame:
        df = df.clone()
        df[row, column] = value
        return df

    return edit


def first_key_row(df: pl.DataFrame) -> int:
    return int(df.with_row_index().filter(pl.col("is_key"))["index"][0])


def first_plain_row(df: pl.DataFrame) -> int:
    return int(df.with_row_index().filter(~pl.col("is_key") & pl.col("lsd").is_not_null())["index"][0])


def changed_text(df: pl.DataFrame) -> pl.DataFrame:
    """The first document's text with one letter changed (same length), its sha256 recomputed."""
    text = df["text"][0]
    i = text.index("e")
    new = text[:i] + "a" + text[i + 1 :]
    return cell("sha256", 0, text_sha256(new))(cell("text", 0, new)(df))


def shorter_text(df: pl.DataFrame) -> pl.DataFrame:
    text = df["text"][0][:20]
    df = cell("text", 0, text)(df)
    return cell("n_chars", 0, 20)(cell("sha256", 0, text_sha256(text))(df))


def swap_span(df: pl.DataFrame) -> pl.DataFrame:
    start, end = df["char_start"][0], df["char_end"][0]
    return cell("char_end", 0, start)(cell("char_start", 0, end)(df))


def duplicate_id(df: pl.DataFrame) -> pl.DataFrame:
    return cell("doc_id", 1, df["doc_id"][0])(df)


def set_setting(key: str, value) -> Callable[[dict], None]:
    def edit(record: dict) -> None:
        record["settings"][key] = value
        record["fingerprint"] = settings_fingerprint(record["settings"])  # as an editor would

    return edit


def plain_token_after_the_first_window(df: pl.DataFrame, length: int = 1) -> int:
    """A non-key token of doc-0 past the first short window, with at least ``length`` characters
    that are not whitespace."""
    text = STAGE1_TEXTS[0]  # doc-0's source: its text is a prefix
    rows = df.with_row_index().filter(
        (pl.col("doc_id") == "doc-0") & ~pl.col("is_key") & (pl.col("token_index") > 30)
    )
    for i, a, b in zip(rows["index"], rows["char_start"], rows["char_end"], strict=True):
        if b - a >= length and not text[a:b].isspace() and not text[a].isspace():
            return int(i)
    raise AssertionError("no such token")


def moved_end(df: pl.DataFrame) -> pl.DataFrame:
    """A non-key token's char_end moved over the next 12 tokens (the spans stay the merge)."""
    row = plain_token_after_the_first_window(df)
    return cell("char_end", row, df["char_end"][row + 12])(df)


def uncovered_letter(df: pl.DataFrame) -> pl.DataFrame:
    """A non-key token's char_start moved one character on: a letter no token covers."""
    row = plain_token_after_the_first_window(df, length=2)
    return cell("char_start", row, df["char_start"][row] + 1)(df)


def shorter_source(df: pl.DataFrame) -> pl.DataFrame:
    """A truncated document whose source is said to be no longer than its text."""
    return cell("n_source_chars", 0, df["n_chars"][0])(df)


# name: (how the artifact is damaged, the error it must give)
ARTIFACT_DAMAGES: dict[str, tuple[dict, str]] = {
    # silent wrong numbers before
    "span_past_the_text": (
        {"spans": lambda df: cell("char_end", 0, 10_000)(df)},
        r"spans\.parquet row 0 \(document 'doc-0'\), column char_end: past the end of the text",
    ),
    "negative_span_start": (
        {"spans": cell("char_start", 0, -3)},
        r"spans\.parquet row 0 \(document 'doc-0'\), column char_start: not 0 <= char_start <= char_end",
    ),
    "widened_span": (
        {"spans": lambda df: cell("char_end", 0, df["char_end"][0] + 1)(df)},
        r"spans\.parquet row 0 \(document 'doc-0'\), column char_end: not the merge of the key tokens",
    ),
    "n_spans_too_low": (
        {"documents": lambda df: cell("n_spans", 0, df["n_spans"][0] - 1)(df)},
        r"document 'doc-0' has \d+ rows in spans\.parquet but documents\.n_spans says \d+",
    ),
    "negative_soft_weight": (
        {"tokens": lambda df: cell("soft_weight", first_plain_row(df), -1.0)(df)},
        r"tokens\.parquet row \d+ \(document 'doc-0'\), column soft_weight: not min\(exp\(lsd\), gamma=5",
    ),
    "infinite_soft_weight": (
        {"tokens": lambda df: cell("soft_weight", first_plain_row(df), float("inf"))(df)},
        r"column soft_weight: not a finite number \(inf\)",
    ),
    "nan_lsd": (
        {"tokens": lambda df: cell("lsd", first_plain_row(df), float("nan"))(df)},
        r"column lsd: not a finite number \(nan\)",
    ),
    "infinite_lsd": (
        {"tokens": lambda df: cell("lsd", first_key_row(df), float("inf"))(df)},
        r"column lsd: not a finite number \(inf\)",
    ),
    "is_key_contradicts_lsd": (
        {"tokens": lambda df: cell("is_key", first_plain_row(df), True)(df)},
        r"column is_key: not lsd > alpha=0\.5 and long_logprob > beta=-30\.0",
    ),
    "span_of_another_document": (
        {"spans": lambda df: cell("doc_id", 0, "doc-1")(df)},
        r"document 'doc-0' has \d+ rows in spans\.parquet but documents\.n_spans says \d+",
    ),
    "no_documents": (
        {name: (lambda df: df.head(0)) for name in ("documents", "tokens", "spans")},
        r"has no documents",
    ),
    "threshold_edited_in_the_manifest": (
        {"manifest": set_setting("alpha", 0.25)},
        r"column is_key: not lsd > alpha=0\.25",
    ),
    "fingerprint_kept_for_other_settings": (
        {"manifest": lambda m: m["settings"].update(K=17)},
        r"the manifest's fingerprint is not that of its settings",
    ),
    # tracebacks before
    "reversed_span": (
        {"spans": swap_span},
        r"spans\.parquet row 0 \(document 'doc-0'\), column char_start: not 0 <= char_start <= char_end",
    ),
    "overlapping_spans": (
        {"spans": lambda df: cell("char_start", 1, df["char_start"][0])(df)},
        r"spans\.parquet row 1 \(document 'doc-0'\), column char_start: spans are not sorted and disjoint",
    ),
    "manifest_without_settings": (
        {"manifest": lambda m: m.pop("settings")},
        r"manifest\.json lacks K, d, alpha, beta, gamma, evaluator",
    ),
    "text_shorter_than_its_offsets": (
        {"documents": shorter_text},
        r"manifest documents\[0\]\.sha256 disagrees with documents\.parquet \(document 'doc-0'\)",
    ),
    "duplicate_document_ids": (
        {"documents": duplicate_id},
        r"documents\.parquet row 1 \(document 'doc-0'\), column doc_id: duplicate document id",
    ),
    # second round: loaded with the fingerprint recomputed before
    "token_end_moved_over_the_next_tokens": (
        {"tokens": moved_end},
        r"tokens\.parquet row \d+ \(document 'doc-0'\), column char_end: before the previous token's end",
    ),
    "a_letter_no_token_covers": (
        {"tokens": uncovered_letter},
        r"column char_start: leaves characters before it that no token covers and that are not whitespace",
    ),
    "truncated_but_as_long_as_its_source": (
        {"documents": shorter_source},
        r"documents\.parquet row 0 \(document 'doc-0'\), column truncated: true, but the text is as long",
    ),
    "max_tokens_below_the_token_count": (
        {"manifest": set_setting("max_tokens", 100)},
        r"documents\.parquet row 0 \(document 'doc-0'\), column n_tokens: more than max_tokens=100",
    ),
    "K_rewritten": (
        {"manifest": set_setting("K", 2048)},
        r"tokens\.parquet row 15 \(document 'doc-0'\), column short_logprob: not null exactly before "
        r"sequence position K=2048",
    ),
    "K_one_more": (
        {"manifest": set_setting("K", 17)},
        r"tokens\.parquet row 15 \(document 'doc-0'\), column short_logprob: not null exactly before",
    ),
    "d_rewritten_larger": (
        {"manifest": set_setting("d", 12)},
        r"tokens\.parquet row 23 \(document 'doc-0'\), column short_logprob: differs from long_logprob in "
        r"the first short window, positions \[16, 28\)",
    ),
    "d_rewritten_smaller": (
        {"manifest": set_setting("d", 5)},
        r"column short_logprob: equals long_logprob at position K\+d=21 in every document that tells",
    ),
    "script_in_K": (
        {"manifest": set_setting("K", "<img src=x onerror=alert(1)>")},
        r"manifest settings\.K='<img src=x onerror=alert\(1\)>' is not a positive integer",
    ),
    "d_as_text": ({"manifest": set_setting("d", "8")}, r"manifest settings\.d='8' is not a positive integer"),
    "gamma_as_bool": (
        {"manifest": set_setting("gamma", True)},
        r"settings\.gamma=True is not a finite positive",
    ),
    "evaluator_spec_not_text": (
        {"manifest": lambda m: set_setting("evaluator", {**m["settings"]["evaluator"], "spec": 7})(m)},
        r"manifest settings\.evaluator\.spec is not a string",
    ),
}


def manifest_text_hash(root):
    """A manifest editor that records the sha256 of the first text as ``root``'s documents.parquet
    now holds it (the edited text)."""

    def fix(record: dict) -> None:
        text = pl.read_parquet(root / "documents.parquet")["text"][0]
        record["documents"][0]["sha256"] = text_sha256(text)

    return fix


def remerged(src, dst, tokens_edit):
    """``src`` with its tokens edited, then the spans, key counts and span counts made to agree: only
    the offsets (or values) the edit changed can give it away."""
    edited = craft(src, dst.with_name(dst.name + "-tokens"), tokens=tokens_edit)
    tokens = pl.read_parquet(edited / "tokens.parquet")
    rows = []
    for doc_id, group in tokens.group_by("doc_id", maintain_order=True):
        key = group.filter(pl.col("is_key"))
        starts, ends, counts = definition.merge_spans(
            key["char_start"].to_numpy(), key["char_end"].to_numpy()
        )
        rows += [
            {"doc_id": doc_id[0], "span_index": i, "char_start": a, "char_end": b, "n_tokens": c}
            for i, (a, b, c) in enumerate(zip(starts, ends, counts, strict=True))
        ]
    spans = pl.DataFrame(rows, schema=pl.from_arrow(TABLES["spans"].empty_table()).schema)

    def documents(df: pl.DataFrame) -> pl.DataFrame:
        n_spans = spans.group_by("doc_id").len()
        n_key = tokens.group_by("doc_id").agg(pl.col("is_key").sum().alias("k"))
        df = df.join(n_spans, on="doc_id", how="left").join(n_key, on="doc_id", how="left")
        return df.with_columns(n_spans=pl.col("len").fill_null(0), n_key_tokens=pl.col("k")).drop("len", "k")

    out = craft(edited, dst, documents=documents, spans=lambda _: spans)
    shutil.rmtree(edited)
    return out


def key_end_over_the_next_tokens(n: int = 12):
    def edit(df: pl.DataFrame) -> pl.DataFrame:
        row = first_key_row(df)
        return cell("char_end", row, df["char_end"][row + n])(df)

    return edit


def default_artifact():
    path = ROOT / str(compose_config("score", []).artifact)
    if not (path / "manifest.json").is_file():
        pytest.skip(f"needs the default artifact {path}: run `make keytokens` first")
    return path


# ----------------------------------------------------------------------------------------------
# Results lines


# made-up results lines for the leaderboard: their artifact, settings and scores
BOARD_ARTIFACT = {
    "name": "govreport_sample--gemma3-270m--K1024-d1024-max4096",
    "fingerprint": "ab12cd34ef56" * 4,
}


BOARD_SETTINGS = {"context_limit": None, "add_bos": True, "dtype": "float32", "allow_truncation": False}


# model: (ppl, longppl, longppl_soft)
BOARD_SCORES = {
    "smollm2-135m": (18.25, 9.8125, 12.5),
    "qwen2.5-0.5b": (14.5, 6.25, 9.375),
    "gemma3-270m": (16.75, 11.625, 13.0),
}


def result_line(model: str, scores: tuple, date: str, artifact: dict = BOARD_ARTIFACT, **settings) -> dict:
    ppl, longppl, soft = scores
    grid = {"alpha=2,beta=-2": {"longppl": longppl, "n_key_tokens": 800}}
    return {
        "result_id": hashlib.sha256(f"{model}|{date}|{longppl}|{settings}".encode()).hexdigest()[:16],
        "model_name": model,
        "model": {"spec": model, "kind": "embedded", "revision": None, "file_sha256": "00" * 32},
        "artifact": {**artifact, "source": f"artifacts/keytokens/{artifact['name']}"},
        "settings": {**BOARD_SETTINGS, **settings},
        "date": date,
        "wall_seconds": 12.3,
        "pipeline_version": "0.1.0",
        "corpus": {
            "ppl": ppl,
            "longppl": longppl,
            "longppl_soft": soft,
            "n_tokens": 50000,
            "n_key_tokens": 800 if longppl is not None else 0,
            "key_char_coverage": 0.97,
            "grid": grid,
        },
        "documents": [{"doc_id": "govreport-00", "ppl": ppl, "longppl": longppl, "n_tokens": 10}],
    }


def write_lines(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def base_rows() -> list[dict]:
    return [
        result_line(m, s, f"2026-11-22T0{i + 1}:00:00+00:00") for i, (m, s) in enumerate(BOARD_SCORES.items())
    ]


RECORDED_RESULTS = ROOT / "conf" / "refresh" / "recorded.jsonl"  # a genuine result line (schema 5)


def genuine_line() -> dict:
    return json.loads(RECORDED_RESULTS.read_text().splitlines()[0])


# ----------------------------------------------------------------------------------------------
# The official implementation's inputs: a pre-tokenized dataset as the paper's, its key spans


# the documents of the pre-tokenized dataset (one too short to keep), its selection and K
OFFICIAL_TEXTS = [
    "The committee reported the bill to the House. " * 8 + "line 7: REGISTER_CONTENT is 4512. " * 5,
    "Federal law provides a variety of powers for the President to use in response to crisis. " * 5,
    "Emoji 😀 and 中文字符 with café, CRLF\r\nand tabs\t. The Congressional Research Service reports. " * 4,
]


OFFICIAL_SHORT = "short text"


OFFICIAL_MIN_LEN, OFFICIAL_K = 40, 16


def decoded_corpus(dataset: Path, decoder: Path) -> list:
    spec = CorpusSpec(
        name="govreport_paper",
        dataset=str(dataset),
        tokenized_with=str(decoder),
        min_tokenized_len=OFFICIAL_MIN_LEN,
        id_field=None,
    )
    return load_corpus(spec)


def save_dataset(path: Path, tokenizer, texts: list[str], prefix: str = "") -> Path:
    """A DatasetDict with a test split, rows as emozilla/govreport-test-tokenized has them."""
    import datasets

    ids = [
        [tokenizer.bos_token_id, *tokenizer(prefix + t, add_special_tokens=False)["input_ids"]] for t in texts
    ]
    data = datasets.Dataset.from_dict({"input_ids": ids, "tokenized_len": [len(i) for i in ids]})
    datasets.DatasetDict({"test": data}).save_to_disk(path)
    return path


def import_overrides(src: dict, out: Path, *extra: str) -> list[str]:
    return [
        f"corpus.dataset={src['dataset']}",
        f"corpus.tokenized_with={src['decoder']}",
        f"corpus.min_tokenized_len={OFFICIAL_MIN_LEN}",
        f"spans_dir={src['spans']}",
        f"official.tokenizer={src['evaluator']}",
        "official.evaluator=tiny/evaluator",
        "official.folder=Tiny-Evaluator",
        f"K={OFFICIAL_K}",
        f"output_dir={out}",
        "progress=false",
        *extra,
    ]


# ----------------------------------------------------------------------------------------------
# A tiny LooGLE folder and its key-token artifacts (cut to 150 tokens, and whole)


TEXT_A = (
    "Alpha Station opened in 1901 on the northern line. "
    + "The station was rebuilt after a fire in 1923, and its hall has a painted ceiling. " * 3
    + "In 1990 the line closed and the hall became a museum of the railway. " * 4
)
TEXT_B = "Beta Bridge crosses the river in three spans. " * 6 + "It was painted red in 2004. " * 3
EARLY = "The station was rebuilt after a fire in 1923"
LATE = "In 1990 the line closed and the hall became a museum of the railway."


def qa_pairs(*items: tuple[str, str, list[str], str | None]) -> str:
    out = [{"Q": q, "A": a, "S": s} | ({"type": t} if t else {}) for q, a, s, t in items]
    return repr(out)  # qa_pairs: a Python literal held as a string, as LooGLE publishes it


def loogle_run_overrides(
    model_dir: Path, out: Path, results: Path, *extra: str, limit: int, new_tokens: int
) -> list[str]:
    """`make loogle`'s settings for a tiny local model on ``shortdep_qa``'s first ``limit`` questions,
    its predictions and results under ``out``."""
    return [
        "model=local", f"model.spec={model_dir}", "task=shortdep_qa", f"limit={limit}",
        f"max_new_tokens={new_tokens}", "device=cpu", "progress=false", f"predictions_dir={out}",
        f"results={results}", *extra,
    ]  # fmt: skip


def loogle_folder(folder: Path) -> Path:
    """``loogle_dir``'s files written into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    short = {"title": "Alpha", "input": TEXT_A, "output": None}
    short["qa_pairs"] = qa_pairs(("When was it rebuilt?", "1923", [EARLY], None))
    long_a = {"title": "Alpha", "input": TEXT_A, "output": None}
    long_a["qa_pairs"] = qa_pairs(
        ("What came after the fire?", "a museum", [EARLY + "[6]", LATE], "comprehension_and_reasoning"),
        ("Who painted it?", "nobody knows", ["An architect from Paris painted it."], "computation"),
    )
    long_b = {"title": "Beta", "input": TEXT_B, "output": None}
    long_b["qa_pairs"] = qa_pairs(
        ("What colour?", "red", ["It was painted red in 2004."], "timeline_reorder")
    )
    for name, rows in (("shortdep_qa", [short]), ("longdep_qa", [long_a, long_b])):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def build_loogle_artifact(out: Path, model_dir: Path, folder: Path, *extra: str) -> Path:
    overrides = keytokens_overrides(model_dir, "unused", out)
    overrides = [o for o in overrides if not o.startswith("corpus")]
    run_keytokens(compose_keytokens([*overrides, "corpus=loogle_sample", f"corpus.loogle={folder}", *extra]))
    return out / "test"


# ----------------------------------------------------------------------------------------------
# Numbers computed directly


def direct_logprobs(model, ids: list[int]) -> np.ndarray:
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].double()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None]).squeeze(1).numpy()


def sum_order_bound(a: torch.Tensor, b: torch.Tensor, lp: torch.Tensor) -> torch.Tensor:
    """How far log-probs from logits ``a`` may be from those from ``b`` when the two differ only by
    the order of float32 sums: a log-prob is z_t - logsumexp(z), and both terms move by at most
    max_j |dz_j| (the logsumexp is 1-Lipschitz in the max norm), so 2 max_j |dz_j|, plus 8 ulp of the
    magnitudes involved for the float32 rounding of the logsumexp and the subtraction. Row by row."""
    moved = (a - b).abs().amax(dim=1)
    return 2 * moved + 8 * torch.finfo(torch.float32).eps * (b.abs().amax(dim=1) + lp.abs())


def swap_two_token_ids(path, text: str) -> None:
    """Swap the ids of two vocabulary entries that ``text`` uses (the file still loads)."""
    from tokenizers import Tokenizer

    spec = json.loads(path.read_text())
    ids = list(dict.fromkeys(Tokenizer.from_file(str(path)).encode(text).ids))[:2]
    vocab = spec["model"]["vocab"]
    names = {i: t for t, i in vocab.items() if i in ids}
    vocab[names[ids[0]]], vocab[names[ids[1]]] = ids[1], ids[0]
    path.write_text(json.dumps(spec))


# ----------------------------------------------------------------------------------------------
# The pipeline's layers (docs/architecture.md) and import cycles


# Lowest first. A module belongs to the first layer whose prefix it has; `__main__` modules (the
# commands' shells) are the top layer, whatever their package.
LAYERS = [
    (
        "foundation",
        (
            "pipeline.errors",
            "pipeline.files",
            "pipeline.formats",
            "pipeline.provenance",
            "pipeline.hub",
            "pipeline.outputs",
            "pipeline.marks",
            "pipeline.commands.shell",
        ),
    ),
    ("settings", ("pipeline.definition", "pipeline.settings", "pipeline.metric_registry")),
    ("inputs", ("pipeline.text", "pipeline.models")),
    ("contract", ("pipeline.artifact", "pipeline.results")),
    ("reports", ("pipeline.reporting",)),
    ("stages", ("pipeline.keytokens", "pipeline.score", "pipeline.forgetting", "pipeline.training")),
    ("stages", ("pipeline.official", "pipeline.ladder", "pipeline.loogle")),
    ("jobs", ("pipeline.jobs",)),
    ("api", ("pipeline.api", "pipeline.lmeval")),
    ("sharing", ("pipeline.sharing",)),
    ("commands", ("pipeline.commands", "pipeline.cli")),
]


RANKS = {name: rank for rank, name in enumerate(dict.fromkeys(name for name, _ in LAYERS))}


def rank(module: str) -> int:
    if module == "pipeline":
        return RANKS["api"]  # the package's lazy re-exports of the Python API
    for name, prefixes in LAYERS:
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return RANKS[name]
    raise AssertionError(
        f"{module} is in no layer: add it to tests/support.py (LAYERS) and docs/architecture.md"
    )


def cycles_in(edges: dict[str, set[str]]) -> list[str]:
    """Every import cycle of a graph (node -> the nodes it imports), as ``a -> b -> a``."""
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(edges[node]):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*stack[stack.index(target) :], target]))
            elif not state.get(target):
                visit(target, stack)
        stack.pop()
        state[node] = 2

    for node in edges:
        if not state.get(node):
            visit(node, [])
    return cycles


def make_targets_running(pattern: str) -> dict[str, str]:
    """Make target -> what its recipe runs: the first match of ``pattern``'s group on its lines."""
    found, target = {}, None
    for line in (ROOT / "Makefile").read_text().splitlines():
        if re.match(r"^[a-z][\w-]*:", line):
            target = line.split(":")[0]
        for ran in re.findall(pattern, line):
            found.setdefault(target, ran)
    return found
