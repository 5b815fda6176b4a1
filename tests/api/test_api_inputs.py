"""The Python API checks what the command line checks: every bad argument is one PipelineError (a
model that is not loaded, a tokenizer given by name, a bytes path, a boolean for a number, a lone
surrogate, spans past the end of the text), checked before any work."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from pipeline import api
from pipeline.api.dropin import compute_longppl
from pipeline.errors import PipelineError
from pipeline.models.loading import load_model
from pipeline.official.span_files import format_spans
from tests.support import STAGE1_TEXTS


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


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("model=None", r"^model is NoneType: pass a causal LM loaded in memory"),
        (
            "meta",
            r"^model LlamaForCausalLM: its parameter .* is on the meta device, so its weights are not loaded",
        ),
        ("tokenizer=str", r"^tokenizer is str \('gpt2'\): pass the tokenizer object"),
        (
            "tokenizer=function",
            r"^tokenizer is function \('<function .*'; it has no encode\(\)\): pass the tokenizer object",
        ),
        (
            "float16 with a float32 layer",
            r"^model LlamaForCausalLM is float16 but its parameter model\.layers\.0\.mlp\.\w+\.weight is "
            r"float32: its forward would mix the two and fail; pass the model in one dtype",
        ),
    ],
)
def test_the_api_refuses_what_is_no_loaded_model_or_tokenizer(held, tokenizer, tiny_artifact, case, said):
    """On 70baafc a tokenizer given as a function and a float16 model with one float32 layer gave
    tracebacks (AttributeError from the tokenizer's use, a dtype mismatch inside the model)."""
    from pipeline import api

    model, meta = held
    given = {
        "model=None": (None, tokenizer),
        "meta": (meta, tokenizer),
        "tokenizer=str": (model, "gpt2"),
        "tokenizer=function": (model, lambda text, **options: tokenizer(text, **options)),
        "float16 with a float32 layer": (mixed_precision(model), tokenizer),
    }[case]
    with pytest.raises(PipelineError, match=said):
        api.score(*given, tiny_artifact)
    with pytest.raises(PipelineError, match=said):
        api.find_key_tokens(["a text " * 30], *given)


def test_the_api_refuses_a_bytes_path(held, tokenizer, tiny_artifact, tmp_path):
    from pipeline import api

    model, _ = held
    with pytest.raises(PipelineError, match=r"^keytokens is bytes \(b'.*'\): pass a str or a pathlib.Path$"):
        api.score(model, tokenizer, str(tiny_artifact).encode())
    with pytest.raises(PipelineError, match=r"^results_file is bytes"):
        api.score(model, tokenizer, tiny_artifact, results_file=str(tmp_path / "s.jsonl").encode())
    with pytest.raises(PipelineError, match=r"^directory is bytes"):
        api.save_key_tokens(None, str(tmp_path / "a").encode())


def test_dropin_and_api_arguments(tiny, tiny_artifact, tmp_path):
    model, tokenizer = tiny.model, tiny.tokenizer
    text = STAGE1_TEXTS[0]
    pair = (model, model, tokenizer, tokenizer)
    cases = [
        (lambda: compute_longppl(text, *pair, trunc_len=True), "setting trunc_len=True: True is a boolean"),
        (lambda: api.find_key_tokens([text], model, tokenizer, K=True), "setting K=True: True is a boolean"),
        (lambda: compute_longppl("ab\ud800c", *pair), r"character 2 is a lone surrogate \(U\+D800\)"),
        (lambda: api.find_key_tokens(["ab\udfffc"], model, tokenizer), r"'doc-00000'.*lone surrogate"),
    ]
    for call, message in cases:
        with pytest.raises(PipelineError, match=message):
            call()
    as_text = compute_longppl(text, model, model, tokenizer, tokenizer, trunc_len="16", sliding_window=8)
    assert as_text == compute_longppl(
        text, model, model, tokenizer, tokenizer, trunc_len=16, sliding_window=8
    )
    assert api.score(model, tokenizer, tiny_artifact, documents=np.int64(1)).corpus["n_documents"] == 1


def test_dropin_text_longer_than_the_context_and_spans_past_its_end(tiny, tmp_path):
    model, tokenizer = tiny.model, tiny.tokenizer
    spans = tmp_path / "spans.txt"
    spans.write_text(format_spans(np.array([0]), np.array([5])))
    long = STAGE1_TEXTS[0] * 20
    with pytest.raises(PipelineError) as error:
        compute_longppl(long, model, None, tokenizer, save_path=str(spans))
    message = str(error.value)
    assert "more than its context of 512" in message and "pipeline.api.score(..., context_limit=" in message
    assert "pass context_limit=" not in message  # compute_longppl has no such argument
    spans.write_text(format_spans(np.array([10**6 - 5]), np.array([10**6])))  # saved for another text
    with pytest.raises(
        PipelineError, match=r"reach character 1000000, past the end of the text \(\d+ characters\)"
    ):
        compute_longppl(STAGE1_TEXTS[0], model, None, tokenizer, save_path=str(spans))


def mixed_precision(model):
    """A float16 copy of ``model`` with one layer left in float32."""
    mixed = copy.deepcopy(model).half()
    mixed.model.layers[0].mlp.float()
    return mixed


def test_modules_a_model_keeps_in_float32_by_design_are_taken(held, tokenizer):
    """transformers keeps some modules of a 16-bit model in float32 (``_keep_in_fp32_modules``: MoE
    routers and the like); such a model is no mixture to refuse."""
    from pipeline.models.pairing import check_held

    mixed = mixed_precision(held[0])
    mixed._keep_in_fp32_modules = ["mlp"]
    check_held(mixed, tokenizer)
    mixed._keep_in_fp32_modules = ["self_attn"]
    with pytest.raises(PipelineError, match=r"is float16 but its parameter model\.layers\.0\.mlp\."):
        check_held(mixed, tokenizer)
