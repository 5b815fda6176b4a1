"""The model ``longppl`` for lm-evaluation-harness: lm-eval's ``loglikelihood_rolling`` computed by the
score engine, exactly as `make score` scores a document.

The requests go through the one recipe every job does (``pipeline.jobs.recipe``), as a texts job
(``pipeline.jobs.texts``) run by the score engine's one loop: the model's tokens of each exact text
with character offsets, the model's BOS before them (``add_bos``), one forward pass of the body and
the output head in blocks (full-vocabulary logits never exist), or windows of ``context_limit``
tokens. A text longer than the model's context is an error that names
``context_limit=`` and ``allow_truncation=true``, never a silent cut. The answer to a request is a
float, the text's log-likelihood (what lm-eval's perplexity tasks sum), that also carries the tokens
and their log-probs (``RollingLogLikelihood``), from which a LongPPL task computes its key-token sums.

Options (``--model_args``) are `make score`'s: the model (``pretrained``: an embedded short name, a
directory, a ``.gguf`` file or a Hub id; ``revision``, ``device_map``, ``trust_remote_code``,
``attn_implementation``, ``name``), the score settings (``add_bos``, ``context_limit``,
``allow_truncation``) and the compute settings (``dtype``, ``head_dtype``, ``head_chunk``,
``vocab_tile``, ``window_batch_tokens``, ``cache_dir``; ``device`` is lm-eval's ``--device``).
"""

from __future__ import annotations

from typing import Any

import lm_eval.models  # noqa: F401  (lm-eval's own models first: it loads them only while its registry is empty)
import numpy as np
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from pipeline.errors import PipelineError
from pipeline.jobs.recipe import run
from pipeline.jobs.texts import TextsJob
from pipeline.models.loading import LoadedModel, ModelChoice, eval_mode, in_memory
from pipeline.models.logprobs import scorer_for
from pipeline.provenance import json_sha256
from pipeline.results.keys import context_name, model_identity
from pipeline.results.score import model_record
from pipeline.score.documents import ModelTokens
from pipeline.score.engine import Text, settings_record
from pipeline.settings import Compute, ScoreSettings, field_names, parse

MODEL_NAME = "longppl"  # --model longppl
DEFAULT_MODEL = "smollm2-135m"  # as `make score` (conf/score.yaml)
SCORE_OPTIONS = ("add_bos", "context_limit", "allow_truncation")  # the grid is make score's only
MODEL_OPTIONS = tuple(n for n in field_names(ModelChoice) if n != "spec")
# lm-eval passes these to every model; documents are scored one at a time, as by `make score`.
LM_EVAL_OPTIONS = ("batch_size", "max_batch_size")
CACHE_OWNER = "longppl-cache-owner"  # the key of a --use_cache database that names whose answers it holds


class RollingLogLikelihood(float):
    """A text's log-likelihood (the float lm-eval's rolling tasks sum) carrying the model's tokens of it
    (``tokens``: offsets and log-probs, ``pipeline.score.documents.ModelTokens``). JSON and ``str`` see
    the float alone, so lm-eval's samples files stay small; it pickles (``--use_cache``)."""

    tokens: ModelTokens

    def __new__(cls, tokens: ModelTokens) -> RollingLogLikelihood:
        value = super().__new__(cls, float(np.nansum(tokens.logprobs)))
        value.tokens = tokens
        return value

    def __reduce__(self) -> tuple[Any, ...]:
        return (RollingLogLikelihood, (self.tokens,))


@register_model(MODEL_NAME)
class LongPPLLM(LM):
    """lm-eval's LM interface on the score engine (module docstring). ``pretrained``: a model spec, or a
    model already in memory (with its ``tokenizer``), or a ``LoadedModel``."""

    def __init__(
        self,
        pretrained: Any = DEFAULT_MODEL,
        tokenizer: Any = None,
        device: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        choice_options, self.settings, self.compute = split_options(options, device)
        if isinstance(pretrained, str) and tokenizer is not None:
            raise PipelineError(
                f"tokenizer= goes with a model in memory; {pretrained} is loaded with its own tokenizer"
            )
        if not isinstance(pretrained, str) and ({"dtype", "cache_dir"} & set(options) or device):
            raise PipelineError(
                "a model in memory runs in its own dtype and on its own device: convert or move it "
                "before passing it, and leave out dtype, device and cache_dir"
            )
        if isinstance(pretrained, LoadedModel):
            self.lm = pretrained
        elif isinstance(pretrained, str):
            self.lm = ModelChoice.parse({"spec": pretrained, **choice_options}).load(self.compute)
        else:
            self.lm = in_memory(pretrained, tokenizer, choice_options.get("name"))
        self.model_name = display_name(pretrained, choice_options, self.settings, self.lm)
        self.scorer = scorer_for(self.lm, self.compute)
        with eval_mode(self.lm.model):
            self.scorer.check_against_full_forward()

    # What lm-eval records of the model (results "config", tokenizer fields).
    @property
    def tokenizer(self) -> Any:
        return self.lm.tokenizer

    @property
    def eot_token_id(self) -> int | None:
        return self.lm.tokenizer.eos_token_id

    @property
    def max_length(self) -> int | None:
        return self.lm.context_length

    def get_model_info(self) -> dict[str, Any]:
        """Merged into the results file's ``config``: the model's source and the score settings, as
        a `make score` results line records them (``pipeline.results.lmeval`` reads them back)."""
        return {
            "longppl_model_name": self.model_name,
            "longppl_model": model_record(self.lm, self.settings.add_bos),
            "longppl_settings": settings_record(self.settings, self.compute, self.lm, self.scorer),
        }

    def set_cache_hook(self, cache_hook: Any) -> None:
        """lm-eval's ``--use_cache`` answers a request from its database by the request alone (the text),
        not by the model: a database holds the answers of one model and its settings only
        (``check_cache``)."""
        check_cache(getattr(cache_hook, "dbdict", None), self.cache_key())
        super().set_cache_hook(cache_hook)

    def cache_key(self) -> str:
        """What the answers depend on: the model's identity and the score settings."""
        info = self.get_model_info()
        model = model_identity(info["longppl_model"])
        return json_sha256({"model": model, "settings": info["longppl_settings"]})

    def token_logprobs(self, texts: list[Text], progress: bool = False) -> list[RollingLogLikelihood]:
        """The model's tokens of each text and their log-probs, as `make score` computes them."""
        job = TextsJob(self.lm, tuple(texts), self.settings, self.compute, progress=progress)
        return [RollingLogLikelihood(tokens) for tokens in run(job).value]

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        texts = [Text(request_id(request), request.args[0]) for request in requests]
        out = self.token_logprobs(texts, progress=not disable_tqdm)
        for text, value in zip(texts, out, strict=True):
            self.cache_hook.add_partial("loglikelihood_rolling", (text.text,), value)
        return out

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        raise PipelineError(
            f"--model {MODEL_NAME} scores perplexity tasks (loglikelihood_rolling): run multiple-choice "
            "tasks with lm-eval's own models (--model hf)"
        )

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """LooGLE's questions (``pipeline.lmeval.loogle_tasks``) by `make loogle`'s generation; no other."""
        from pipeline.lmeval.loogle_tasks import answer_requests, is_loogle

        if requests and all(is_loogle(r) for r in requests):
            with eval_mode(self.lm.model):
                return answer_requests(self.lm, requests, disable_tqdm)
        raise PipelineError(
            f"--model {MODEL_NAME} generates for LooGLE's tasks only (loogle_*): run other generation "
            "tasks with lm-eval's own models (--model hf)"
        )


def split_options(
    options: dict[str, Any], device: str | None
) -> tuple[dict[str, Any], ScoreSettings, Compute]:
    """``--model_args`` as the model's choice (``ModelChoice`` fields but ``spec``), ``ScoreSettings``
    and ``Compute``, each checked as `make score` checks them; an unknown option is an error."""
    known = {*MODEL_OPTIONS, *SCORE_OPTIONS, *field_names(Compute), *LM_EVAL_OPTIONS} - {"device"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise PipelineError(
            f"--model_args {unknown[0]}=...: no such option of --model {MODEL_NAME} (options: pretrained, "
            f"{', '.join(sorted(known - set(LM_EVAL_OPTIONS)))}; the device is --device)"
        )
    compute_values = {**options, "device": device or "auto"}
    settings = parse(ScoreSettings, {k: v for k, v in options.items() if k in SCORE_OPTIONS})
    choice = {k: v for k, v in options.items() if k in MODEL_OPTIONS}
    return choice, settings, parse(Compute, compute_values)


def display_name(pretrained: Any, choice: dict[str, Any], settings: ScoreSettings, lm: LoadedModel) -> str:
    """The leaderboard's name, as `make score` gives it: the model's name (or its spec's), and
    ``@ctx<N>`` with a context limit."""
    if isinstance(pretrained, str):
        base = ModelChoice.parse({"spec": pretrained, **choice}).display_name
    else:
        base = lm.source.spec
    return context_name(base, settings.context_limit)


def check_cache(db: Any, key: str) -> None:
    """A ``--use_cache`` database must be empty or hold this model's answers (its ``CACHE_OWNER`` entry
    is ``key``); it is marked as this model's when empty. Another model's (or ``--model hf``'s, or other
    settings') answers would be returned for this one's: an error, before any request runs."""
    if db is None:
        return
    owner = db.get(CACHE_OWNER)
    if owner is None and len(db) == 0:
        db[CACHE_OWNER] = key
    elif owner != key:
        whose = "another model or other settings" if owner else "a model other than --model longppl"
        raise PipelineError(
            f"the --use_cache database {getattr(db, 'filename', '')} holds the answers of {whose}, which "
            "lm-eval would return for this one by their texts alone: give each model and setting its own "
            "--use_cache path"
        )


def request_id(request: Any) -> str:
    """How an error names a request's document: its ``doc_id`` field, else task and index."""
    doc = request.doc if isinstance(request.doc, dict) else {}
    return str(doc.get("doc_id", f"{request.task_name} #{request.doc_id}"))
