"""Shared fixtures: tiny random-weight models with a real (tiny, trained) tokenizer, built from configs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from studies.random_models import random_model, tiny_config

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]

TRAINING_TEXT = [
    "Federal law provides a variety of powers for the President to use in response to crisis.",
    "The Congressional Research Service reports on appropriations, emergencies and statutes.",
    "line 1: REGISTER_CONTENT is 4512. line 2: REGISTER_CONTENT is 2290.",
    "Unicode: café, naïve, 中文字符, emoji 😀👩‍👩‍👧, e\u0301, CRLF\r\n and tabs\t.",
] * 4


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


@pytest.fixture(autouse=True)
def small_attention_blocks(monkeypatch):
    """Query blocks of 8 tokens, so that the tiny models' sequences go through the block-sparse path."""
    from pipeline.models import attention

    monkeypatch.setattr(attention, "QUERY_BLOCK", 8)


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer):
    """A saved tiny Llama checkpoint with the tiny tokenizer: loads like any local model."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny-llama"), tokenizer)


def save_tiny_model(
    path: Path, tokenizer, arch: str = "llama", max_positions: int = 512, seed: int = 0
) -> Path:
    build_model(arch, len(tokenizer), max_positions=max_positions, seed=seed).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def other_model_dir(tmp_path_factory):
    """A second tiny model with a different tokenizer, as the model being evaluated."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny-other"), build_tokenizer(300), "llama", seed=1)


STAGE1_TEXTS = [
    "The committee reported the bill. " * 12 + "line 7: REGISTER_CONTENT is 4512. " * 4,
    "Emoji 😀👩‍👩‍👧 and 中文字符 with e\u0301 and CRLF\r\nand a NUL \x00 byte. " * 6,
    "Federal law provides a variety of powers for the President. " * 10,
]


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


@pytest.fixture(scope="session")
def tiny_artifact(tmp_path_factory, tiny_model_dir):
    """A stage 1 artifact of the tiny evaluator on three short documents."""
    tmp = tmp_path_factory.mktemp("artifact")
    corpus = tmp / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": f"doc-{i}", "text": t}) + "\n" for i, t in enumerate(STAGE1_TEXTS))
    )
    run_keytokens(compose_keytokens(keytokens_overrides(tiny_model_dir, corpus, tmp)))
    return tmp / "test"


@pytest.fixture
def write_corpus(tmp_path):
    def write(rows: list[dict], name: str = "corpus.jsonl") -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        return path

    return write


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


def pairs(*items: tuple[str, str, list[str], str | None]) -> str:
    out = [{"Q": q, "A": a, "S": s} | ({"type": t} if t else {}) for q, a, s, t in items]
    return repr(out)  # qa_pairs: a Python literal held as a string, as LooGLE publishes it


@pytest.fixture(scope="session")
def loogle_dir(tmp_path_factory) -> Path:
    """A LooGLE folder of two tasks whose first document is in both (as the sample's article is)."""
    return loogle_folder(tmp_path_factory.mktemp("loogle"))


def loogle_folder(folder: Path) -> Path:
    """``loogle_dir``'s files written into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    short = {"title": "Alpha", "input": TEXT_A, "output": None}
    short["qa_pairs"] = pairs(("When was it rebuilt?", "1923", [EARLY], None))
    long_a = {"title": "Alpha", "input": TEXT_A, "output": None}
    long_a["qa_pairs"] = pairs(
        ("What came after the fire?", "a museum", [EARLY + "[6]", LATE], "comprehension_and_reasoning"),
        ("Who painted it?", "nobody knows", ["An architect from Paris painted it."], "computation"),
    )
    long_b = {"title": "Beta", "input": TEXT_B, "output": None}
    long_b["qa_pairs"] = pairs(("What colour?", "red", ["It was painted red in 2004."], "timeline_reorder"))
    for name, rows in (("shortdep_qa", [short]), ("longdep_qa", [long_a, long_b])):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.fixture(scope="session")
def loogle_artifact(tmp_path_factory, tiny_model_dir, loogle_dir) -> Path:
    return build_loogle_artifact(tmp_path_factory.mktemp("loogle-artifact"), tiny_model_dir, loogle_dir)


@pytest.fixture(scope="session")
def whole_loogle_artifact(tmp_path_factory, tiny_model_dir, loogle_dir) -> Path:
    """The same documents whole (the tiny model's 512 positions hold them)."""
    out = tmp_path_factory.mktemp("whole-loogle-artifact")
    return build_loogle_artifact(out, tiny_model_dir, loogle_dir, "max_tokens=null")


def build_loogle_artifact(out: Path, model_dir: Path, folder: Path, *extra: str) -> Path:
    overrides = keytokens_overrides(model_dir, "unused", out)
    overrides = [o for o in overrides if not o.startswith("corpus")]
    run_keytokens(compose_keytokens([*overrides, "corpus=loogle_sample", f"corpus.loogle={folder}", *extra]))
    return out / "test"
