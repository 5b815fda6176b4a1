"""The per-document columns (``pipeline.artifact.columns``) against a direct numpy computation of each."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipeline.artifact.columns import COLUMNS, artifact_columns, document_columns
from pipeline.artifact.reader import load_artifact
from pipeline.definition import KeyTokenDefinition

RULE = KeyTokenDefinition(K=4, d=2, alpha=0.5, beta=-3.0, gamma=5.0)


def log_probs(n: int, K: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    long = -rng.exponential(1.5, n)
    long[0] = np.nan  # the first token has no prediction
    short = long - rng.normal(0.3, 1.0, n)
    short[:K] = np.nan  # no short context before the K-th token
    return long, short


@pytest.mark.parametrize("n", [5, 37, 200])
def test_columns_match_numpy(n):
    long, short = log_probs(n, RULE.K, seed=n)
    got = document_columns(long, short, RULE)
    lsd = (long - short)[RULE.K :]  # the scored tokens, by hand
    lcl = long[RULE.K :]
    key = (lsd > RULE.alpha) & (lcl > RULE.beta)
    pos = np.where(lsd > 0, lsd, 0.0)
    thirds = np.array_split(pos, 3)
    expected = {
        "longppl_tokens": n,
        "longppl_scored_tokens": n - RULE.K,
        "longppl_key_tokens": int(key.sum()),
        "longppl_key_ratio": key.sum() / len(lsd),
        "longppl_lsd_p50": np.quantile(lsd, 0.5),
        "longppl_lsd_p90": np.quantile(lsd, 0.9),
        "longppl_lsd_p99": np.quantile(lsd, 0.99),
        "longppl_mean_positive_lsd": pos.sum() / len(pos),
        "longppl_mean_positive_lsd_first": thirds[0].mean() if thirds[0].size else None,
        "longppl_mean_positive_lsd_middle": thirds[1].mean() if thirds[1].size else None,
        "longppl_mean_positive_lsd_last": thirds[2].mean() if thirds[2].size else None,
        "longppl_soft_mass": np.sum([min(math.exp(v), RULE.gamma) for v in lsd]),
        "longppl_ppl": math.exp(-np.mean(long[1:])),
    }
    assert set(got) == set(COLUMNS) == set(expected)
    for name, value in expected.items():
        if value is None:
            assert got[name] is None, name
        else:
            assert got[name] == pytest.approx(value, rel=1e-12, abs=1e-12), name


def test_a_document_of_at_most_K_tokens_has_no_scored_token():
    long, short = log_probs(RULE.K, RULE.K, seed=1)
    got = document_columns(long, short, RULE)
    assert got["longppl_scored_tokens"] == got["longppl_key_tokens"] == 0
    assert got["longppl_lsd_p50"] is None and got["longppl_key_ratio"] is None
    assert got["longppl_mean_positive_lsd_last"] is None and got["longppl_soft_mass"] == 0.0
    assert got["longppl_ppl"] == pytest.approx(math.exp(-np.mean(long[1:])))


def test_an_artifacts_columns_agree_with_its_stored_counts(tiny_artifact):
    """``artifact_columns`` (the summary's and the pages'): each document's key tokens by the artifact's
    own alpha and beta (0.5, -30 here, not the defaults) are its stored count, and its soft-weight mass
    is the sum of its stored soft weights (gamma)."""
    art = load_artifact(tiny_artifact)
    got = artifact_columns(art)
    docs = art.documents.to_pylist()
    assert list(got) == [d["doc_id"] for d in docs]
    for d in docs:
        weights = np.asarray(
            art.tokens.filter(art.tokens["doc_id"].to_numpy(zero_copy_only=False) == d["doc_id"])[
                "soft_weight"
            ].to_numpy(zero_copy_only=False),
            dtype=np.float64,
        )
        row = got[d["doc_id"]]
        assert (row["longppl_tokens"], row["longppl_key_tokens"]) == (d["n_tokens"], d["n_key_tokens"])
        assert row["longppl_soft_mass"] == pytest.approx(np.nansum(weights), rel=1e-12)
    assert sum(r["longppl_key_tokens"] for r in got.values()) > 0
