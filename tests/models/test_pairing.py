"""A model scored with a tokenizer that is not its own: an error that says so, never numbers."""

from __future__ import annotations

import json

import pytest

from pipeline import api
from pipeline.api.dropin import compute_longppl
from pipeline.errors import PipelineError
from pipeline.models.loading import load_model
from pipeline.models.pairing import worse_than_uniform
from tests.support import ROOT, STAGE1_TEXTS, build_model, build_tokenizer

SWAPPED = r"its BOS is token 1, the model's config says 0; its EOS is token 0, the model's config says 1"


def swapped_tokenizer():
    """The tiny models' vocabulary with BOS and EOS exchanged: the ids disagree with the models' configs."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=build_tokenizer().backend_tokenizer, bos_token="<eos>", eos_token="<bos>"
    )


def test_special_tokens_that_disagree_with_the_config_are_an_error(tiny_model_dir, tiny_artifact):
    lm = load_model(str(tiny_model_dir), dtype="float64", device="cpu")
    wrong = swapped_tokenizer()
    with pytest.raises(PipelineError, match=r"the tokenizer is not the one of .*" + SWAPPED):
        api.score(lm.model, wrong, tiny_artifact)
    with pytest.raises(PipelineError, match=SWAPPED):
        api.find_key_tokens(STAGE1_TEXTS[:1], lm.model, wrong, K=16, d=8)
    with pytest.raises(PipelineError, match=SWAPPED):  # the drop-in with the evaluator's tokenizer swapped
        compute_longppl(
            STAGE1_TEXTS[0], lm.model, lm.model, lm.tokenizer, wrong, trunc_len=16, sliding_window=8
        )


def test_a_token_id_without_an_embedding_is_an_error(tiny_artifact):
    tokenizer = build_tokenizer()
    small = build_model("llama", 100)  # 100 embeddings; the tokenizer's ids go up to len(tokenizer) - 1
    with pytest.raises(
        PipelineError, match=r"token id \d+ is beyond the model's vocabulary of 100 embeddings"
    ):
        api.score(small, tokenizer, tiny_artifact)


def test_worse_than_uniform_is_reported(other_model_dir, tiny_artifact):
    """The random-weight tiny model is worse than uniform (its PPL is in the billions): a warning,
    not an error, since an untrained model may be scored on purpose; the numbers are unchanged."""
    lm = load_model(str(other_model_dir), dtype="float64", device="cpu")
    with pytest.warns(
        UserWarning, match=r"is above its vocabulary size \(\d+\), worse than guessing uniformly"
    ):
        result = api.score(lm.model, lm.tokenizer, tiny_artifact)
    assert result.ppl > len(lm.tokenizer) and len(result.warnings) == 1
    assert worse_than_uniform(len(lm.tokenizer) - 1.0, len(lm.tokenizer), "m") is None


@pytest.mark.integration
def test_gemma_with_the_smollm2_tokenizer_is_an_error(tiny_artifact):
    """The reported case: Gemma 3 270M scored with SmolLM2's tokenizer gave PPL 7,970,868 (on the
    default artifact; any artifact shows the check, which looks at the model and tokenizer only); the
    drop-in with SmolLM2's tokenizer as the evaluator's gave LongPPL 1.01 over 1 key token."""
    gemma = load_model("gemma3-270m", dtype="float32", device="cpu")
    smol = load_model("smollm2-135m", dtype="float32", device="cpu")
    with pytest.raises(PipelineError, match=r"its BOS is token 1, the model's config says 2"):
        api.score(gemma.model, smol.tokenizer, tiny_artifact, documents=1)
    text = json.loads((ROOT / "data/govreport-sample.jsonl").open(encoding="utf-8").readline())["text"]
    with pytest.raises(PipelineError, match=r"its BOS is token 1, the model's config says 2"):
        compute_longppl(text[:6000], smol.model, gemma.model, smol.tokenizer, smol.tokenizer, trunc_len=512)


def test_the_pairing_rule():
    """The BOS must agree; the EOS only where there is no BOS to compare (a chat fine-tune may end
    turns with a new EOS); config lists and the generation config count."""
    from types import SimpleNamespace as NS

    from pipeline.models.pairing import check_pairing

    def model(bos, eos, generation_eos=None):
        return NS(
            config=NS(bos_token_id=bos, eos_token_id=eos), generation_config=NS(eos_token_id=generation_eos)
        )

    fine = [(model(2, 1), (2, 106)), (model(2, [1, 106]), (2, 106)), (model(None, 2), (None, None))]
    fine += [(model(151643, 151643), (None, 151643)), (model(1, 2, [2, 32000]), (None, 32000))]
    for m, (bos, eos) in fine:
        check_pairing(m, NS(bos_token_id=bos, eos_token_id=eos), "m")
    for m, (bos, eos), said in [
        (model(2, 1), (1, 2), "its BOS is token 1, the model's config says 2; its EOS is token 2"),
        (model(None, 1), (None, 151643), "its EOS is token 151643, the model's config says 1"),
    ]:
        with pytest.raises(PipelineError, match=said):
            check_pairing(m, NS(bos_token_id=bos, eos_token_id=eos), "m")
