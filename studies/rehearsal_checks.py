"""What the paper's run must be, written from the paper and the official code independently of this
project's configs, and the checks that compare a configuration, an artifact or its texts with it
(``studies.rehearse_paper``; tests/studies/test_rehearse_paper.py runs them on broken settings).

Sources: the paper's Appendix A.1 (K, d, alpha, beta, gamma); the official ``run_ppl.sh``
(``emozilla/govreport-test-tokenized``, ``--dataset-min-tokens 16384 --samples 50``, max_length 32768)
and ``perplexity.py`` (``input_ids[0:max_length-1]``: 32767 ids, decoded with the Llama-2 tokenizer;
the evaluated model without special tokens; since a7082c3 the corpus values combined in log space);
``longppl.py`` (the evaluator's long pass with its special tokens, the short windows
``input_ids[:, s:s+K+d]`` without them).
"""

from __future__ import annotations

from typing import Any

PAPER = {
    "K": 4096,
    "d": 1024,
    "alpha": 2.0,
    "beta": -2.0,
    "gamma": 5.0,
    "short_window_bos": False,  # longppl.py: short windows are slices of the ids, no BOS
    "add_bos": True,  # longppl.py: the evaluator's tokenizer with its special tokens (BOS)
    "max_tokens": None,  # the texts are the corpus's, never cut again
    "min_tokens": 0,
    "num_documents": None,
    "dtype": "bfloat16",
    "corpus.min_tokenized_len": 16384,  # run_ppl.sh: --dataset-min-tokens 16384
    "corpus.max_ids": 32767,  # perplexity.py: input_ids[0:max_length-1], max_length = 32768
}
# What the preset says beyond that (before it runs): the paper's sources and a GPU.
PAPER_CONFIG = {
    **PAPER,
    "head_dtype": "auto",  # float32 on CUDA
    "device": "cuda",
    "corpus.dataset": "emozilla/govreport-test-tokenized",
    "corpus.tokenized_with": "NousResearch/Llama-2-7b-hf",  # the tokenizer that decodes input_ids
    "corpus.limit": 50,  # run_ppl.sh: --samples 50
}
# preset=long (issue 33): the paper's definition and conventions on PG-19 books four times its length,
# selected like the paper's texts in Llama-2 tokens (131072 and more, cut to 131072 minus one).
LONG = {
    **{k: v for k, v in PAPER.items() if not k.startswith("corpus.")},
    "corpus.min_tokenized_len": 131072,
    "corpus.max_ids": 131071,
    "corpus.too_few": "longest",  # fewer long books than asked: the longest, recorded
}
LONG_CONFIG = {
    **LONG,
    "head_dtype": "auto",
    "device": "cuda",
    "corpus.dataset": "emozilla/pg19-test",  # deepmind/pg19's test split as Parquet
    "corpus.revision": "c5e39bf32e33f9111323aa68d7d9000d22722035",
    "corpus.tokenized_with": "NousResearch/Llama-2-7b-hf",
    "corpus.limit": 20,
    "evaluator.spec": "meta-llama/Llama-3.1-8B",  # 128k context
}
# The official refreshes: the evaluated model as perplexity.py runs it, and its aggregation.
OFFICIAL_SCORING = {"aggregate": "official", "settings.add_bos": False, "settings.dtype": "bfloat16"}
# The import: the definition the span files were computed with.
OFFICIAL_IMPORT = {k: PAPER[k] for k in ("K", "d", "alpha", "beta")}


class RehearsalFailure(Exception):
    """A setting, an artifact or a text that is not the paper's: the rehearsal fails."""


def flat(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as dotted keys (``corpus.max_ids``)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def check_values(
    found: dict[str, Any], expected: dict[str, Any], where: str, whose: str = "the paper's"
) -> None:
    """Every expected key has its value in ``found`` (flattened), or one RehearsalFailure lists them
    (``whose``: the run they come from, as the message names it)."""
    values = flat(found)
    wrong = [
        f"{key}={values.get(key, '<missing>')!r} ({whose}: {value!r})"
        for key, value in expected.items()
        if key not in values or values[key] != value or type(values[key]) is not type(value)
    ]
    if wrong:
        raise RehearsalFailure(f"{where} is not {whose} run: " + "; ".join(wrong))


def check_texts(
    texts: dict[str, str], rows: list[dict[str, Any]], decoder: Any, limit: int, run: dict[str, Any] = PAPER
) -> None:
    """The artifact's texts are the run's (the paper's by default): the rows of at least 16384 ids,
    the first ``limit``, each ``input_ids[:32767]`` decoded by the reference tokenizer (never 32768
    ids, never cut by the evaluator); ``preset=long``'s 131072 and 131071."""
    kept = [row for row in rows if row["tokenized_len"] >= run["corpus.min_tokenized_len"]][:limit]
    if len(kept) != len(texts):
        raise RehearsalFailure(f"the artifact has {len(texts)} documents, the run's selection {len(kept)}")
    max_ids = run["corpus.max_ids"]
    for (doc_id, text), row in zip(texts.items(), kept, strict=True):
        want = decoder.batch_decode([row["input_ids"][:max_ids]])[0]
        if text == want:
            continue
        near = [
            n
            for n in (max_ids - 1, max_ids + 1, len(row["input_ids"]))
            if decoder.batch_decode([row["input_ids"][:n]])[0] == text
        ]
        what = f"input_ids[:{near[0]}] decoded" if near else f"{len(text)} characters, not {len(want)}"
        raise RehearsalFailure(
            f"document '{doc_id}' is {what}: the run's texts are input_ids[:{max_ids}] decoded "
            f"({max_ids} reference tokens, a max_length of {max_ids + 1} minus one)"
        )
