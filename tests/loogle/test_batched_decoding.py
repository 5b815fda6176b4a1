"""A document's questions decoded together (``batched.decode_document``: the shared prompt tokens once,
the answers in batches) give one-at-a-time decoding's answers (transformers' ``generate``, greedy with
``repetition_penalty=2.0``): token for token on tiny random float64 models (a Llama, and a Gemma 3 with
sliding-window layers), at every batch size, with answers that end early; on the embedded models in
float32, equal or flipped only where the two best tokens nearly tie (margin under 1e-3)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from pipeline.loogle.data.reading import DataSource, load_questions
from pipeline.loogle.generation import batched
from pipeline.loogle.generation.decoding import Cut, cut_prompt, generate_ids
from tests.support import build_model

FLIP_MARGIN = 1e-3


def document_cuts(vocab: int, shared: int, suffixes: list[int], seed: int = 0) -> list[Cut]:
    """Prompts of one document: BOS and ``shared`` common tokens, then each question's own tokens."""
    generator = torch.Generator().manual_seed(seed)
    common = torch.randint(2, vocab, (shared,), generator=generator).tolist()
    cuts = []
    for n in suffixes:
        ids = [0, *common, *torch.randint(2, vocab, (n,), generator=generator).tolist()]
        cuts.append(Cut(ids, len(ids), 0))
    return cuts


def decoded(model, tokenizer, cuts: list[Cut], new_tokens: int, batch_size: int) -> list[batched.Answer]:
    found: dict[int, batched.Answer] = {}
    batched.decode_document(model, tokenizer, cuts, new_tokens, batch_size, found.__setitem__)
    return [found[i] for i in range(len(cuts))]


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize("shared, suffixes", [(60, [3, 7, 11, 15, 19]), (2, [1, 4, 9])])
def test_batched_decoding_equals_one_at_a_time_in_float64(tokenizer, arch, shared, suffixes):
    """(2, [1, 4, 9]): prompts shorter than the Gemma 3's sliding window of 6, so its window layers are
    padded too."""
    model = build_model(arch, len(tokenizer))
    cuts = document_cuts(len(tokenizer), shared, suffixes)
    reference = [generate_ids(model, tokenizer, cut, 24)[0] for cut in cuts]
    # an end-of-text token that answers reach early, at different steps: the batch shrinks as they end
    model.generation_config.eos_token_id = reference[0][5]
    reference = [generate_ids(model, tokenizer, cut, 24)[0] for cut in cuts]
    assert min(map(len, reference)) < 24 and len(set(map(len, reference))) > 1
    for batch_size in (1, 2, len(cuts)):
        answers = decoded(model, tokenizer, cuts, 24, batch_size)
        assert [a.ids for a in answers] == reference, batch_size
        assert [a.text for a in answers] == [tokenizer.decode(r, skip_special_tokens=True) for r in reference]
        assert all(0 <= a.step < len(a.ids) and a.margin >= 0 for a in answers)


def test_the_shared_prefix_leaves_each_question_a_token_of_its_own():
    cuts = [Cut([0, 5, 6, 7], 4, 0), Cut([0, 5, 6, 8, 9], 5, 0), Cut([0, 5, 6], 3, 0)]
    assert batched.common_prefix(cuts) == 2
    assert batched.common_prefix([Cut([0, 5, 6], 3, 0)] * 2) == 2
    assert batched.common_prefix([Cut([0, 5], 2, 0), Cut([1, 5], 2, 0)]) == 0


def first_flip(reference: list[int], margins: list[float], answer: list[int]) -> tuple[int, float] | None:
    """The first step where two decodings part, and the one-at-a-time top-two margin there."""
    for step, (a, b) in enumerate(zip(reference, answer, strict=False)):
        if a != b:
            return step, margins[step]
    assert len(reference) == len(answer)
    return None


@pytest.mark.parametrize("spec", ["smollm2-135m", "gemma3-270m"])
def test_the_embedded_models_give_the_same_answers(spec):
    """Three questions of the sample's first document, two ways: the prompt cut (512 tokens: the kept
    first half shared), and a text shortened to fit (the whole text shared); float32."""
    from pipeline.models.loading import ModelChoice
    from pipeline.settings import Compute

    lm = ModelChoice(spec=spec).load(Compute(dtype="float32", device="cpu"))
    questions = load_questions("shortdep_qa", DataSource())[:3]
    fits = [replace(q, context=q.context[:1500]) for q in questions]
    for group, budget in ((questions, 512), (fits, 4096)):
        cuts = [cut_prompt(lm.tokenizer, q, budget) for q in group]
        assert all(c.cut_tokens > 0 for c in cuts) == (budget == 512)
        answers = decoded(lm.model, lm.tokenizer, cuts, 40, 3)
        for cut, answer in zip(cuts, answers, strict=True):
            reference, margins = generate_ids(lm.model, lm.tokenizer, cut, 40, margins=True)
            flip = first_flip(reference, margins, answer.ids)
            assert flip is None or flip[1] < FLIP_MARGIN, flip


def test_documents_of_one_question_are_decoded_together(monkeypatch):
    """A document's questions share a batch; documents of one question (summaries) share one too."""
    from types import SimpleNamespace

    from pipeline.loogle.data.questions import Question
    from pipeline.loogle.generation import answering

    asked = [Question("longdep_summarization", doc, 0, "text", "", "a") for doc in ("a", "b")]
    asked += [Question("longdep_qa", "c", i, "text", "q", "a") for i in range(2)]
    groups: list[list[int]] = []

    def decode(model, tokenizer, cuts, new, batch, done):
        groups.append([cut.prompt_tokens for cut in cuts])
        for i in range(len(cuts)):
            done(i, batched.Answer([], "", 0, 0.0))

    monkeypatch.setattr(answering, "decode_document", decode)
    cuts = {q.qid: Cut([0, n], n, 0) for n, q in enumerate(asked)}
    found: list[str] = []
    answering.answer(
        SimpleNamespace(model=None, tokenizer=None), asked, cuts, 5, 8, lambda q, _: found.append(q.qid)
    )
    assert groups == [[2, 3], [0, 1]] and sorted(found) == sorted(q.qid for q in asked)
