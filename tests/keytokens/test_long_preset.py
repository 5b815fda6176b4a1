"""preset=long (LongPPL at 128k tokens): PG-19 books selected and cut in Llama-2 tokens as the paper's
texts are, the paper's definition, a 128k evaluator; offline, a missing dataset is one line; the
rehearsal's checks (`make rehearse-long`, studies/rehearse_long.py) fail on a broken setting."""

from __future__ import annotations

import pytest

from pipeline.errors import PipelineError
from pipeline.jobs.keytokens import KeyTokensJob
from pipeline.text.corpus import CorpusSpec, load_corpus
from studies.rehearsal_checks import LONG, LONG_CONFIG, RehearsalFailure
from tests.support import compose_keytokens


def test_the_long_preset_composes_pg19_at_128k():
    cfg = compose_keytokens(["preset=long"])
    corpus = cfg.corpus
    assert (corpus.name, corpus.dataset, corpus.split) == ("pg19_long", "emozilla/pg19-test", "test")
    assert len(corpus.revision) == 40 and int(corpus.revision, 16) >= 0  # a pinned commit
    assert (corpus.tokenized_with, corpus.min_tokenized_len, corpus.max_ids) == (
        "NousResearch/Llama-2-7b-hf",
        131072,
        131071,
    )
    assert (corpus.limit, corpus.too_few) == (20, "longest")
    assert (cfg.K, cfg.d, cfg.alpha, cfg.beta, cfg.gamma) == (4096, 1024, 2.0, -2.0, 5.0)
    assert (cfg.max_tokens, cfg.short_window_bos, cfg.add_bos, cfg.device) == (None, False, True, "cuda")
    assert cfg.evaluator.spec == "meta-llama/Llama-3.1-8B"
    settings = KeyTokensJob.from_config(compose_keytokens(["preset=long", "device=cpu"]))
    assert settings.corpus.record()["too_few"] == "longest"


def test_offline_a_missing_pg19_is_one_line_naming_it():
    spec = CorpusSpec.parse(compose_keytokens(["preset=long"]).corpus)
    with pytest.raises(PipelineError) as error:
        load_corpus(spec)
    message = str(error.value)
    assert "\n" not in message and "could not load dataset 'emozilla/pg19-test'" in message
    assert "corpus.dataset=DIR" in message


def test_the_rehearsal_checks_the_preset():
    from studies.rehearse_long import preflight

    preflight([])
    assert LONG["corpus.max_ids"] == 131071 and LONG_CONFIG["corpus.min_tokenized_len"] == 131072
    for override, problem in (
        ("corpus.max_ids=131072", "corpus.max_ids=131072 (preset=long's: 131071)"),
        ("corpus.too_few=keep", "corpus.too_few='keep' (preset=long's: 'longest')"),
        ("evaluator=gemma3-270m", "evaluator.spec="),
    ):
        with pytest.raises(
            RehearsalFailure,
            match="preset=long is not preset=long's run: .*"
            + problem.replace("(", r"\(").replace(")", r"\)"),
        ):
            preflight([override])
