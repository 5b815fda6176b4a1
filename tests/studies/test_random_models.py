"""The one builder of random-weight models (``studies.random_models``) that the tests and the
benchmarks share: seeded, so that their numbers stay the same run after run."""

from __future__ import annotations

import hashlib

import pytest
import torch

from studies.random_models import LLAMA31_8B, SMALL, config, random_model, tiny_config
from tests.support import build_model


def fingerprint(model) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def test_the_tests_tiny_llama_has_the_weights_it_always_had():
    """The tiny Llama every test builds (seed 0, float64, weights x8), recorded before the builder
    was shared: a change of seeding or shape changes every test's numbers."""
    assert fingerprint(build_model("llama", 400, 512)) == "274a22fde5f2b4f2"
    assert fingerprint(build_model("gemma2", 400, 512)) == "b14b5e74d20d5348"


def test_seeded_built_in_place_and_scaled():
    small = config("llama", vocab_size=300, **SMALL)
    once, again = random_model(small, seed=1), random_model(small, seed=1, device="cpu")
    assert fingerprint(once) == fingerprint(again) != fingerprint(random_model(small, seed=2))
    scaled = random_model(small, seed=1, scale=4.0)
    assert torch.equal(scaled.lm_head.weight, 4.0 * once.lm_head.weight)
    assert random_model(small, dtype=torch.float64).lm_head.weight.dtype == torch.float64
    assert not once.training


def test_shapes_and_errors():
    assert tiny_config("mistral", 300, 64, sliding_window=512).sliding_window == 512
    assert tiny_config("gemma2", 300).attn_logit_softcapping == 2.0
    assert config("llama", **LLAMA31_8B).num_hidden_layers == 32
    with pytest.raises(ValueError, match="no random-weight config for architecture 'gpt2'"):
        tiny_config("gpt2", 300)
