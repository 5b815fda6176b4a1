"""The rehearsal of the paper's run (`make rehearse-paper`, studies/rehearse_paper.py) fails when a paper
setting is broken: its checks on the configs, an artifact's settings and its texts, run here on small
inputs (the rehearsal itself takes minutes and is its own make target)."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from studies.rehearsal_checks import (
    OFFICIAL_SCORING,
    PAPER,
    PAPER_CONFIG,
    RehearsalFailure,
    check_texts,
    check_values,
)
from tests.support import compose_config


def composed(name: str, overrides: list[str]) -> dict:
    return OmegaConf.to_container(compose_config(name, overrides), resolve=True)


def test_the_configs_are_the_paper_run():
    from studies.rehearse_paper import preflight

    preflight([])


@pytest.mark.parametrize(
    ("override", "problem"),
    [
        ("short_window_bos=true", "short_window_bos=True (the paper's: False)"),
        ("corpus.max_ids=32768", "corpus.max_ids=32768 (the paper's: 32767)"),
        ("K=2048", "K=2048 (the paper's: 4096)"),
        ("max_tokens=32768", "max_tokens=32768 (the paper's: None)"),
        ("device=auto", "device='auto' (the paper's: 'cuda')"),
    ],
)
def test_a_broken_preset_setting_fails_the_rehearsal(override, problem):
    from studies.rehearse_paper import preflight

    with pytest.raises(
        RehearsalFailure,
        match="preset=paper is not the paper's run: .*" + problem.replace("(", r"\(").replace(")", r"\)"),
    ):
        preflight([override])


def test_a_broken_official_refresh_fails_it():
    refresh = composed("leaderboard_refresh", ["refresh=official-llama3.1-8b"])
    check_values(refresh, OFFICIAL_SCORING, "refresh")
    for override, problem in (
        ("aggregate=official_before_a7082c3", "aggregate='official_before_a7082c3'"),
        ("settings.add_bos=true", "settings.add_bos=True"),
    ):
        broken = composed("leaderboard_refresh", ["refresh=official-llama3.1-8b", override])
        with pytest.raises(RehearsalFailure, match=problem):
            check_values(broken, OFFICIAL_SCORING, "refresh")


def test_an_artifact_with_other_settings_fails_it():
    settings = {
        **{k: v for k, v in PAPER.items() if "." not in k},
        "corpus": {"min_tokenized_len": 16384, "max_ids": 32767},
    }
    check_values(settings, PAPER, "the artifact")
    with pytest.raises(RehearsalFailure, match=r"the artifact is not the paper's run: short_window_bos=True"):
        check_values({**settings, "short_window_bos": True}, PAPER, "the artifact")
    with pytest.raises(RehearsalFailure, match=r"alpha=2 \(the paper's: 2.0\)"):  # an int is not the float
        check_values({**settings, "alpha": 2}, PAPER, "the artifact")
    assert PAPER_CONFIG["corpus.limit"] == 50 and PAPER_CONFIG["device"] == "cuda"


def test_a_32768_token_text_fails_it(tokenizer):
    """Rows of 33000 reference ids (and a short one, dropped): texts of input_ids[:32767] pass, texts
    of input_ids[:32768] (one token more than the official max_length - 1) fail, naming the cut."""
    rng = np.random.default_rng(0)
    words = [i for i in range(3, len(tokenizer)) if tokenizer.decode([i]).strip().isalpha()]
    rows = [{"input_ids": rng.choice(words, 33000).tolist()} for _ in range(3)]
    rows.insert(1, {"input_ids": rows[0]["input_ids"][:100]})
    for row in rows:
        row["tokenized_len"] = len(row["input_ids"])
    kept = [rows[0], rows[2], rows[3]]

    def texts(n: int) -> dict[str, str]:
        return {f"d{i}": tokenizer.batch_decode([row["input_ids"][:n]])[0] for i, row in enumerate(kept)}

    check_texts(texts(32767), rows, tokenizer, limit=3)
    with pytest.raises(
        RehearsalFailure,
        match=r"document 'd0' is input_ids\[:32768\] decoded: the run's texts are input_ids\[:32767\]",
    ):
        check_texts(texts(32768), rows, tokenizer, limit=3)
    with pytest.raises(RehearsalFailure, match="the artifact has 2 documents, the run's selection 3"):
        check_texts(dict(list(texts(32767).items())[:2]), rows, tokenizer, limit=3)


def test_the_refresh_comparison_passes_the_official_values_and_fails_them_3_percent_off(tmp_path):
    """`make rehearse-paper`'s last check: the recorded results in the official aggregation pass the
    refresh's own comparison, and the same values 3% off fail it (before, the expected values were not
    passed to it, so nothing was compared and the 3%-off case passed: the rehearsal always failed)."""
    import json
    from types import SimpleNamespace

    from studies.rehearse_paper import compare_as_the_refresh_does
    from tests.support import ROOT

    row = json.loads((ROOT / "conf" / "refresh" / "recorded.jsonl").read_text().splitlines()[0])
    row["settings"] |= {"add_bos": False, "dtype": "bfloat16"}  # as the official refresh scores
    (tmp_path / "recorded.jsonl").write_text(json.dumps(row) + "\n")
    expected = compare_as_the_refresh_does(tmp_path, SimpleNamespace(root=tmp_path / "artifact"))
    assert set(expected) == {row["model_name"]} and expected[row["model_name"]]["ppl"] > 1
