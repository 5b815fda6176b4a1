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


# A job built by hand for api.run, and a settings type built directly (on 803d062: documents=0 scored
# nothing and documents=-2 one document; a dict, None or an object gave AttributeError tracebacks midway;
# progress="no" showed a bar; ScoreSettings(context_limit=-5) raised pydantic's ValidationError).
@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"documents": 0}, r"^documents=0: give a positive number, a list of ids, or None$"),
        ({"documents": -2}, r"^documents=-2: give a positive number"),
        ({"documents": []}, r"^documents=\[\]: give a positive number, a list of document ids \(str\)"),
        (
            {"documents": [1, 2]},
            r"^documents=\[1, 2\]: give a positive number, a list of document ids \(str\)",
        ),
        (
            {"settings": {"add_bos": False}},
            r"^ScoreJob\.settings is dict \(\{'add_bos': False\}\): pass a ScoreSettings; "
            r"ScoreSettings\(\*\*\{\.\.\.\}\) builds one from the dict$",
        ),
        (
            {"compute": None},
            r"^ScoreJob\.compute is NoneType \(None\): pass a Compute; Compute\(\) is the defaults$",
        ),
        (
            {"model": object()},
            r"^ScoreJob\.model is object \(<object .*>\): pass a model spec \(str: an embedded",
        ),
        ({"model": b"smollm2-135m"}, r"^ScoreJob\.model is bytes \(b'smollm2-135m'\): pass a model spec"),
        ({"progress": "no"}, r"^ScoreJob\.progress is str \('no'\): pass a bool$"),
        ({"progress": 1}, r"^ScoreJob\.progress is int \(1\): pass a bool$"),
        ({"results": 3}, r"^ScoreJob\.results is int \(3\): pass Path or None$"),
        (
            {"artifact": None},
            r"^ScoreJob\.artifact is NoneType \(None\): pass str or Path or KeyTokenArtifact$",
        ),
    ],
)
def test_a_score_job_built_by_hand_is_checked_when_it_is_made(held, tokenizer, tiny_artifact, fields, said):
    from pipeline.jobs.score import ScoreJob
    from pipeline.models.loading import HeldModel

    given = {"model": HeldModel(held[0], tokenizer), "artifact": str(tiny_artifact), **fields}
    with pytest.raises(PipelineError, match=said):
        api.run(ScoreJob(**given))


def test_a_model_given_as_a_spec_and_a_path_as_text_are_taken_as_such(tiny_artifact, tmp_path):
    from pipeline.jobs.ladder import LadderJob
    from pipeline.jobs.score import ScoreJob
    from pipeline.ladder.rungs import LadderSettings
    from pipeline.models.loading import ModelChoice
    from pipeline.settings import Compute, ScoreSettings

    job = ScoreJob("smollm2-135m", tiny_artifact, results=str(tmp_path / "s.jsonl"), documents=np.int64(2))
    assert job.model == ModelChoice(spec="smollm2-135m") and job.results == tmp_path / "s.jsonl"
    assert job.artifact == tiny_artifact and job.documents == 2
    ladder = LadderJob(tmp_path, tiny_artifact, LadderSettings(), ScoreSettings(), Compute(), *[tmp_path] * 3)
    assert ladder.model == ModelChoice(spec=str(tmp_path)) and ladder.artifact == tiny_artifact
    with pytest.raises(PipelineError, match=r"^LadderJob\.ladder is dict \(\{\}\): pass a LadderSettings"):
        LadderJob("smollm2-135m", tiny_artifact, {}, ScoreSettings(), Compute(), *[tmp_path] * 3)


def test_a_settings_argument_of_another_type_is_refused(tiny, tiny_artifact):
    """On 803d062: ``settings={...}`` with an option was asdict()'s TypeError, without one an
    AttributeError midway."""
    model, tokenizer = tiny.model, tiny.tokenizer
    with pytest.raises(
        PipelineError, match=r"^settings is dict \(\{'add_bos': False\}\): pass a ScoreSettings, or"
    ):
        api.score(model, tokenizer, tiny_artifact, settings={"add_bos": False}, context_limit=64)
    with pytest.raises(PipelineError, match=r"^compute is str \('cpu'\): pass a Compute, or its settings as"):
        api.find_key_tokens(["a text " * 30], model, tokenizer, compute="cpu")
    with pytest.raises(
        PipelineError, match=r"^definition is dict \(\{'K': 16\}\): pass a KeyTokenDefinition"
    ):
        api.find_key_tokens(["a text " * 30], model, tokenizer, definition={"K": 16})


def test_what_is_no_job_is_refused():
    from pipeline.jobs.score import ScoreJob

    for given, shown in (("score", r"str \('score'\)"), (object(), "object"), (ScoreJob, "type")):
        with pytest.raises(
            PipelineError, match=rf"^job is {shown}.*: pass a job of pipeline\.jobs \(ScoreJob, "
        ):
            api.run(given)


def test_the_other_jobs_are_checked_when_they_are_made(tmp_path):
    from pipeline.jobs.forgetting import CurveJob
    from pipeline.jobs.loogle import LoogleJob
    from pipeline.jobs.texts import TextsJob
    from pipeline.settings import Compute, ScoreSettings

    cases = [
        (lambda: TextsJob("m", ["a text"], ScoreSettings(), Compute()), r"^TextsJob\.texts is list"),
        (lambda: CurveJob("m", None, Compute(), None, tmp_path, tmp_path), r"^CurveJob\.options is NoneType"),
        (
            lambda: LoogleJob("m", Compute(), {"task": "all"}),
            r"^LoogleJob\.options is dict .*: pass a LoogleOptions",
        ),
    ]
    for made, said in cases:
        with pytest.raises(PipelineError, match=said):
            made()


def test_the_command_line_reads_progress_as_a_setting_not_as_python_truth(tmp_path):
    from pipeline.commands.shell import compose, plain
    from pipeline.jobs.score import ScoreJob

    values = plain(compose("score", [f"results={tmp_path / 's.jsonl'}", "progress=no"]))
    assert ScoreJob.from_config(values).progress is False  # bool("no") is True
    with pytest.raises(PipelineError, match=r"^setting progress='maybe': Input should be a valid boolean"):
        ScoreJob.from_config({**values, "progress": "maybe"})


@pytest.mark.parametrize(
    ("kind", "given"),
    [
        ("ScoreSettings", {"context_limit": -5}),
        ("ScoreSettings", {"add_bos": "maybe"}),
        ("Compute", {"head_chunk": 0}),
        ("Compute", {"device": "gpu"}),
        ("KeyTokenDefinition", {"K": True}),
        ("ModelChoice", {"spec": "m", "trust_remote_code": "maybe"}),
        ("CorpusSpec", {"name": "c", "limit": -1}),
        ("LadderSettings", {"documents": 0}),
        ("Documents", {"max_tokens": 0}),
    ],
)
def test_a_settings_type_built_directly_says_what_the_command_line_says(kind, given):
    from pipeline.definition import KeyTokenDefinition
    from pipeline.keytokens.selection import Documents
    from pipeline.ladder.rungs import LadderSettings
    from pipeline.models.loading import ModelChoice
    from pipeline.settings import Compute, ScoreSettings, parse
    from pipeline.text.corpus import CorpusSpec

    cls = {c.__name__: c for c in (ScoreSettings, Compute, KeyTokenDefinition, ModelChoice, CorpusSpec,
                                   LadderSettings, Documents)}[kind]  # fmt: skip
    with pytest.raises(PipelineError) as parsed:
        parse(cls, given)
    with pytest.raises(PipelineError) as built:
        cls(**given)
    assert str(built.value) == str(parsed.value) and str(built.value).startswith("setting ")
    with pytest.raises(PipelineError, match=r"^setting context_limit=-5: Input should be greater than or"):
        ScoreSettings(True, -5)  # positional, named in the message all the same


def test_ids_that_are_one_as_text_are_refused_at_once(tiny):
    text = STAGE1_TEXTS[0]
    with pytest.raises(PipelineError, match=r"^texts has the ids 1 and '1', one id '1' as text: give each"):
        api.find_key_tokens({1: text, "1": text + " more"}, tiny.model, tiny.tokenizer, K=16, d=8)
