"""Loading causal language models and their tokenizers, from any source, with provenance.

A model is named by a *spec*: a Hugging Face Hub id (``meta-llama/Llama-3.1-8B``), a local
checkpoint directory, a ``.gguf`` file, or the short name of a package-shipped model
(``gemma3-270m``, ``smollm2-135m``). A GGUF file is dequantised once into a cached safetensors
checkpoint keyed by the file's sha256, so later loads take seconds instead of a minute.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic.dataclasses
import torch

from pipeline.errors import PipelineError, settings_type
from pipeline.models.fast_tokenizer import load_tokenizer
from pipeline.models.gguf import check_header, default_cache_dir
from pipeline.models.identity import ModelSource, cached_snapshot, identify_config_and_code, tokenizer_sha256
from pipeline.models.pairing import check_held, check_pairing
from pipeline.models.placement import describe, execution_device, from_pretrained_placement, one_thread_on_cpu
from pipeline.models.sources import hub_error_message, is_local_model, loadable, prepare, resolve_source
from pipeline.models.weight_hashes import local_weight_hashing
from pipeline.settings import HEAD_DTYPES, Compute, Text, parse

__all__ = ["HeldModel", "LoadedModel", "LoadedTokenizer", "ModelChoice", "ModelSource", "load_model"]

# The pipeline's attention, ``pipeline.models.attention.NAME``. That module is imported with the first
# model a run loads, not with this one: it brings transformers' model code (its distributed tensors,
# sympy, its dynamo and flash-attention integrations: 1.9 s of 5.4 s of a command's imports on this
# project's CPU machine), which nothing before the load needs.
ATTENTION = "blocked_sdpa"


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    source: ModelSource
    dtype: torch.dtype
    device: torch.device

    @property
    def context_length(self) -> int | None:
        """The longest sequence the model was trained for, from its config, if it says."""
        return context_length(self.model.config)

    @property
    def bos_token_id(self) -> int | None:
        return self.tokenizer.bos_token_id

    @property
    def placement(self) -> str:
        """Where it runs, with device indices (``cuda:0``, or a device map's ``cuda:0,cuda:1,cpu``)."""
        return describe(self.model, self.device)

    # A loaded model is a job's model as it is (lm-eval's model runs its requests as jobs).
    needs_hub = False

    @property
    def display_name(self) -> str:
        return self.source.spec

    def check(self) -> None:
        """Nothing to check: it is loaded."""

    def load(self, compute: Compute) -> LoadedModel:
        """Itself: a loaded model keeps its own dtype and device."""
        return self


def context_length(config: Any) -> int | None:
    """The longest sequence a model's ``config`` says it was trained for, if it says."""
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


@dataclass(frozen=True)
class LoadedTokenizer:
    """A model's tokenizer and context length, without its weights (``ModelChoice.tokenizer``)."""

    tokenizer: Any
    context_length: int | None
    source: ModelSource  # resolved and prepared: a GGUF file converted, a Hub id pinned to its commit


@dataclass(frozen=True)
class HeldModel:
    """A model and its tokenizer already in memory (a notebook, a training job), as a job's model:
    checked (a loaded causal LM and its own tokenizer), then taken as it is (``in_memory``)."""

    model: Any
    tokenizer: Any
    name: str | None = None
    needs_hub = False

    @property
    def display_name(self) -> str:
        """``name``, else the model's ``name_or_path``, else its class name."""
        return str(self.name or getattr(self.model, "name_or_path", None) or type(self.model).__name__)

    def check(self) -> None:
        check_held(self.model, self.tokenizer)
        check_pairing(self.model, self.tokenizer, self.display_name)

    def load(self, compute: Compute) -> LoadedModel:
        return in_memory(self.model, self.tokenizer, self.name)


def in_memory(model: Any, tokenizer: Any, name: str | None = None) -> LoadedModel:
    """A model and tokenizer that are already loaded (a notebook, a training job), as a ``LoadedModel``."""
    check_held(model, tokenizer)
    parameter = next(model.parameters())
    spec = name or getattr(model, "name_or_path", None) or type(model).__name__
    source = ModelSource(spec=str(spec), kind="memory", path="")
    source.attn_implementation = getattr(model.config, "_attn_implementation", None)
    check_pairing(model, tokenizer, source.spec)
    return LoadedModel(model, tokenizer, source, dtype=parameter.dtype, device=parameter.device)


@contextlib.contextmanager
def eval_mode(model: Any) -> Iterator[None]:
    """The model in eval mode (no dropout) for the block, then back in the mode it was in."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    dtypes = {dtype: getattr(torch, dtype) for dtype in ("float32", "float64", "bfloat16", "float16")}
    if name not in dtypes:
        raise PipelineError(f"unknown dtype '{name}': use one of auto, {', '.join(dtypes)}")
    return dtypes[name]


def resolve_head_dtype(name: str, model_dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype the output head computes its logits in. ``model``: the model's own (as its forward
    does); ``float32``: float32 for a 16-bit model, whose logits would otherwise be rounded to 16 bits
    before the log-softmax (about 0.05 nats per log-prob in bfloat16); ``auto``: float32 on CUDA,
    the model's dtype elsewhere. Never below the model's dtype."""
    if name not in HEAD_DTYPES:
        raise PipelineError(f"unknown head_dtype '{name}': use one of {', '.join(HEAD_DTYPES)}")
    if model_dtype.itemsize >= 4 or name == "model" or (name == "auto" and device.type != "cuda"):
        return model_dtype
    return torch.float32


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def resolve_device(name: str) -> torch.device:
    """The device to run on, with its index: ``auto`` is the current CUDA device when there is one
    (a data-parallel rank's own GPU once bound), else the CPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise PipelineError(f"device={name} was asked for but no CUDA GPU is visible: use device=cpu")
    device = torch.device(name)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def load_model(
    spec: str,
    *,
    dtype: str = "auto",
    device: str = "auto",
    device_map: str | None = None,
    gpus: list[int] | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    attn_implementation: str | None = ATTENTION,
    cache_dir: str | Path | None = None,
) -> LoadedModel:
    """Load a causal LM and its tokenizer from any supported spec, in eval mode. Top to bottom: where
    it runs and in what dtype; the source (``pipeline.models.sources``: resolved, then prepared: a GGUF
    file converted once, a Hub id pinned to its commit); its identity begun (a local folder's weights
    hashed beside the run: ``ModelSource.to_dict`` waits for them); the load and placement; the checks of
    what loaded; its identity completed."""
    from pipeline.models import attention  # noqa: F401  (registers blocked_sdpa with transformers)

    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    source = resolve_source(spec)
    location, hub_options = prepare(source, revision, cache_dir)
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    hashing = local_weight_hashing(source)
    kwargs = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code, **hub_options}
    kwargs["weights_only"] = True  # a pickled checkpoint is read as tensors only, never run
    kwargs |= {"attn_implementation": attn_implementation} if attn_implementation else {}
    kwargs |= from_pretrained_placement(torch_device, device_map, gpus)
    tokenizer, model = load_parts(source, location, kwargs, hashing, torch_device, cache)
    try:
        check_loaded(model, tokenizer, spec, attn_implementation)
    except BaseException:
        if hashing is not None:
            hashing.cancel()
        raise
    identify(source, model, tokenizer, hashing, trust_remote_code)
    return LoadedModel(
        model=model, tokenizer=tokenizer, source=source, dtype=torch_dtype, device=torch_device
    )


def load_parts(
    source: ModelSource,
    location: str,
    kwargs: dict[str, Any],
    hashing: Any,
    device: torch.device,
    cache: Path,
) -> tuple[Any, Any]:
    """The tokenizer and the model, put where it runs, in eval mode; a failure stops the weights'
    hashing. ``cache``: the pipeline's cache folder (a converted checkpoint's tokenizer verdicts)."""
    options = {k: kwargs[k] for k in ("revision", "local_files_only") if k in kwargs}
    try:
        with loadable(source, location) as folder:  # a GGUF conversion: exactly its recorded files
            tokenizer = _load_tokenizer(
                source, folder, cache, trust_remote_code=kwargs["trust_remote_code"], **options
            )
            model = _from_pretrained(source, folder, kwargs)
    except BaseException:
        if hashing is not None:
            hashing.cancel()
        raise
    if "device_map" not in kwargs:
        model.to(device)
    return tokenizer, model.eval()


def check_loaded(model: Any, tokenizer: Any, spec: str, attn_implementation: str | None) -> None:
    """The tokenizer is the model's, and the model's forward calls the attention asked for."""
    check_pairing(model, tokenizer, spec)
    if attn_implementation == ATTENTION and not attention_dispatches(model):
        raise PipelineError(
            f"'{spec}' does not call transformers' attention interface (custom modelling code?), so "
            f"attn_implementation={ATTENTION} would be ignored: pass attn_implementation=sdpa (or "
            "another implementation its code supports) in its evaluator/model group"
        )


def identify(source: ModelSource, model: Any, tokenizer: Any, hashing: Any, trust_remote_code: bool) -> None:
    """What the record says the loaded model is: its weights' hashes (still computed beside the run:
    ``ModelSource.to_dict`` waits for them, where a run records them), its attention implementation, a
    Hub commit's tokenizer files, its config files (and remote code)."""
    source.pending = hashing
    source.attn_implementation = getattr(model.config, "_attn_implementation", None)
    if source.kind == "hub" and (snapshot := cached_snapshot(source.spec, source.revision)) is not None:
        source.tokenizer_sha256 = tokenizer_sha256(snapshot)  # the files of the commit loaded
    identify_config_and_code(source, model, tokenizer, trust_remote_code)


def _load_tokenizer(source: ModelSource, location: str, cache: Path, **options: Any) -> Any:
    """The model's tokenizer (a GGUF file's converted checkpoint's in its fast form where it is known to
    be the same: ``pipeline.models.fast_tokenizer``); a folder without one is an error that says so."""
    if source.kind in ("embedded", "gguf"):  # checked against its record: a failure names the conversion
        return load_tokenizer(Path(location), cache)
    try:
        from transformers import AutoTokenizer  # with the model, not the command (start-up)

        if source.kind in ("embedded", "gguf"):  # the conversion's files were checked against its record
            return load_tokenizer(Path(location), cache)
        return AutoTokenizer.from_pretrained(location, **options)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        if (
            source.kind == "local"
            and not any(Path(location).glob("*tok*"))
            and not any(Path(location).glob("vocab*"))
        ):
            raise PipelineError(
                f"{source.spec} has no tokenizer (no tokenizer.json, tokenizer.model or vocabulary file "
                "beside config.json): copy the model's tokenizer files into it"
            ) from exc
        raise PipelineError(
            f"could not load the tokenizer of '{source.spec}' from {source.path}: {one_line(exc)}"
        ) from exc


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's message on one line (a multi-line message joined), at most ``limit`` characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _from_pretrained(source: ModelSource, location: str, kwargs: dict[str, Any]) -> Any:
    """``from_pretrained``, a failure one PipelineError; a model that refuses sdpa (Gemma 2:
    soft-capped attention) refuses any implementation named like it, so ``blocked_sdpa`` is retried
    under its other name."""
    from transformers import AutoModelForCausalLM

    from pipeline.models import attention

    attn = kwargs.get("attn_implementation")
    try:
        try:
            return AutoModelForCausalLM.from_pretrained(location, **kwargs)
        except ValueError as exc:
            if attn != ATTENTION or "scaled_dot_product" not in str(exc):
                raise
        return AutoModelForCausalLM.from_pretrained(
            location, **{**kwargs, "attn_implementation": attention.ALIAS}
        )
    except (OSError, ValueError, KeyError, EOFError, pickle.UnpicklingError) as exc:
        raise PipelineError(_load_error_message(source, exc, attn)) from exc


def attention_dispatches(model: Any) -> bool:
    """Whether a forward pass of ``model`` calls ``blocked_sdpa`` (remote code may ignore it)."""
    from pipeline.models import attention

    before = attention.CALLS[0]
    device = execution_device(model.get_input_embeddings())
    with torch.inference_mode(), one_thread_on_cpu(device):
        model(input_ids=torch.zeros(1, 2, dtype=torch.long).to(device), use_cache=False)
    return attention.CALLS[0] > before


@settings_type
@pydantic.dataclasses.dataclass(frozen=True)
class ModelChoice:
    """A model as a Hydra ``evaluator/`` or ``model/`` group describes it (``conf/model/*.yaml``)."""

    spec: Text
    revision: Text | None = None
    device_map: str | dict[str, Any] | None = None
    trust_remote_code: bool = False
    attn_implementation: str | None = ATTENTION
    name: Text | None = None  # the leaderboard's name for it; None: derived from the spec

    @classmethod
    def parse(cls, node: Any, prefix: str = "model.") -> ModelChoice:
        """A ``model``/``evaluator`` group (a mapping or an OmegaConf node), checked: an unknown key
        or a value of the wrong type is one PipelineError."""
        return parse(cls, node, prefix=prefix, strict=True)

    def check(self) -> None:
        """Fail now, in one line, when the spec cannot load (a missing path, a file that is not GGUF, a
        Hub id that is malformed, unknown or out of reach), before any slower work of a command."""
        source = resolve_source(self.spec)
        if source.kind == "gguf":
            check_header(Path(source.path))
        elif source.kind == "hub":
            prepare(source, self.revision, None)

    @property
    def needs_hub(self) -> bool:
        """Whether loading it may reach the Hub (not an embedded model, nor an existing path)."""
        return not is_local_model(self.spec)

    @property
    def display_name(self) -> str:
        """The leaderboard's name: ``name``, else the spec (a file's stem, a directory's name)."""
        if self.name:
            return str(self.name)
        path = Path(self.spec)
        return path.stem if self.spec.endswith(".gguf") else path.name if path.is_dir() else self.spec

    def tokenizer(self, compute: Compute) -> LoadedTokenizer:
        """Its tokenizer and context length without its weights, the source prepared as ``load``
        prepares it (a GGUF file converted once into the compute settings' cache, a Hub id pinned)."""
        from transformers import AutoConfig  # with the model, not the command (start-up)

        source = resolve_source(self.spec)
        location, hub_options = prepare(source, self.revision, compute.cache_dir)
        cache = Path(compute.cache_dir) if compute.cache_dir else default_cache_dir()
        options = {k: hub_options[k] for k in ("revision", "local_files_only") if k in hub_options}
        tokenizer = _load_tokenizer(
            source, location, cache, trust_remote_code=self.trust_remote_code, **options
        )
        try:
            config = AutoConfig.from_pretrained(location, trust_remote_code=self.trust_remote_code, **options)
        except (OSError, ValueError, KeyError) as exc:
            raise PipelineError(_load_error_message(source, exc, None)) from exc
        return LoadedTokenizer(tokenizer, context_length(config), source)

    def load(self, compute: Compute, gpus: list[int] | None = None) -> LoadedModel:
        """The model with the compute settings' dtype, device and GGUF cache."""
        return load_model(
            self.spec,
            dtype=compute.dtype,
            device=compute.device,
            device_map=self.device_map,
            gpus=gpus,
            revision=self.revision,
            trust_remote_code=self.trust_remote_code,
            attn_implementation=self.attn_implementation,
            cache_dir=compute.cache_dir,
        )


def _load_error_message(source: ModelSource, exc: Exception, attn_implementation: str | None) -> str:
    detail = one_line(exc)
    if attn_implementation and attn_implementation in str(exc):
        return (
            f"'{source.spec}' does not support attn_implementation={attn_implementation} ({detail}): "
            "pass attn_implementation=sdpa (or another implementation its code supports)"
        )
    if isinstance(exc, pickle.UnpicklingError):
        return (
            f"could not load the weights of '{source.spec}': a pickled checkpoint (.bin) that holds more "
            "than tensors, refused without running it (weights_only): use a safetensors checkpoint from "
            "a source you trust"
        )
    if "trust_remote_code" in str(exc):
        return f"'{source.spec}' needs custom code: pass trust_remote_code=true if you trust it"
    if source.kind == "hub":
        return hub_error_message(source.spec, detail, unreached=True)
    return f"could not load model '{source.spec}' from {source.path}: {detail}"
