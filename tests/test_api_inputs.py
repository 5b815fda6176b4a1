"""The Python API checks what the command line checks: every bad argument is one PipelineError."""

from __future__ import annotations

import pytest

from pipeline import api
from pipeline.api.dropin import compute_longppl
from pipeline.errors import PipelineError
from pipeline.models.loading import load_model
from tests.conftest import STAGE1_TEXTS


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float64", device="cpu")


def test_bad_arguments(tiny, tiny_artifact):
    model, tokenizer = tiny.model, tiny.tokenizer
    text = STAGE1_TEXTS[0]
    cases = [
        (
            lambda: api.find_key_tokens([text], model, tokenizer, gamma=0),
            "setting gamma=0: Input should be gr",
        ),
        (lambda: api.find_key_tokens([text], model, tokenizer, alpha=float("nan")), "setting alpha=nan: In"),
        (lambda: api.score(model, tokenizer, tiny_artifact, documents=0), r"documents=0: give a positive"),
        (lambda: api.score(model, tokenizer, tiny_artifact, documents="doc-0"), r"documents='doc-0': give a"),
        (lambda: api.score(model, tokenizer, tiny_artifact, documents=True), r"documents=True: give a"),
        (lambda: api.score(model, tokenizer, tiny_artifact, documents=[1]), r"documents=\[1\]: give a"),
        (lambda: api.score(model, tokenizer, tiny_artifact, gamma=5), r"unknown setting 'gamma'"),
        (lambda: api.find_key_tokens(text.encode(), model, tokenizer), r"texts is bytes: pass a str"),
        (lambda: api.find_key_tokens([text.encode()], model, tokenizer), r"is bytes, not str: decode it"),
        (
            lambda: compute_longppl(text.encode(), model, model, tokenizer, tokenizer),
            r"text is bytes, not str",
        ),
    ]
    for call, message in cases:
        with pytest.raises(PipelineError, match=message):
            call()
