"""The settings types every command and the Python API share, each defined once with its defaults
and constraints, and the one way a bad value becomes an error (``parse``).

- ``KeyTokenDefinition`` (``pipeline.definition``): what makes a token key.
- ``Compute``: how a model runs (dtype, device, the output head's dtype and blocks, window
  batches, torch.compile, the cache folder): never what it computes, up to float rounding.
- ``ScoreSettings``: what the score stage's numbers depend on besides the model and the artifact.

Commands take these from their Hydra config (flat keys: ``K=2048 dtype=bfloat16``), the Python API
from keyword arguments; both go through ``parse``, so a bad value is the same one-line
``PipelineError`` (``setting K=0: Input should be greater than 0``) wherever it comes from.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import fields
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BeforeValidator, Field, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass

from pipeline.definition import PAPER_GRID, NotBool, Positive
from pipeline.errors import PipelineError, settings_type, validation_message

T = TypeVar("T")


def _as_text(value: Any) -> Any:
    """A number where text is meant (Hydra reads ``revision=1234567`` as one) as its text."""
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


Text = Annotated[str, BeforeValidator(_as_text)]
NonNegative = Annotated[int, NotBool, Field(ge=0)]
DirectoryName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9._+@=-]*$", max_length=200)]


def directory_name(text: str) -> str:
    """A derived name (from a corpus, a model) as one plain directory name: characters other than
    letters, digits and ``._+@=-`` replaced by ``_``, no leading dot (never ``..``, never a path)."""
    return re.sub(r"[^A-Za-z0-9._+@=-]+", "_", text).lstrip(".")


def _device(value: str) -> str:
    """``auto`` or a device torch knows (``cpu``, ``cuda``, ``cuda:1``, ``mps``, ...)."""
    if value == "auto":
        return value
    import torch

    try:
        torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError("not a device: use auto, cpu, cuda or cuda:<index>") from None
    return value


Device = Annotated[str, AfterValidator(_device)]
DTYPES = ("auto", "float32", "float64", "bfloat16", "float16")
HEAD_DTYPES = ("auto", "model", "float32")
DEFAULT_HEAD_CHUNK = 2048
DEFAULT_VOCAB_TILE = 16384
DEFAULT_WINDOW_BATCH_TOKENS = 16384
COMPILE_CHOICES = ("auto", "on", "off")


def _switch(value: Any) -> Any:
    """A YAML or Hydra boolean (``on``/``off`` in a YAML file, ``true``/``false``) as ``on``/``off``."""
    return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


Switch = Annotated[Literal[COMPILE_CHOICES], BeforeValidator(_switch)]


@settings_type
@dataclass(frozen=True)
class Compute:
    """How models run, shared by every command that runs one (``conf/compute.yaml``)."""

    dtype: Literal[DTYPES] = "auto"  # auto: bfloat16 on CUDA, float32 elsewhere
    device: Device = "auto"  # auto, cpu, cuda, cuda:1, ...
    head_dtype: Literal[HEAD_DTYPES] = "model"  # the output head: model (its own), float32, auto (CUDA: fp32)
    head_chunk: Positive = DEFAULT_HEAD_CHUNK  # the head in blocks of head_chunk positions ...
    vocab_tile: Positive | None = DEFAULT_VOCAB_TILE  # ... x vocab_tile entries (None: whole vocabulary)
    window_batch_tokens: Positive = DEFAULT_WINDOW_BATCH_TOKENS  # short windows batched up to this size
    cache_dir: str | None = None  # GGUF conversions, kernels; None: $LONGPPL_CACHE or ~/.cache/longppl
    compile: Switch = "auto"  # each decoder layer under torch.compile; auto: pipeline.models.compilation

    def record(self) -> dict[str, Any]:
        """The head's blocks and the window batches, as results files record them."""
        return {k: getattr(self, k) for k in ("head_chunk", "vocab_tile", "window_batch_tokens")}


def _grid(value: Any) -> Any:
    """``paper`` (or None) is the paper's Table 2 grid; pairs are read as given."""
    if value is None or value == "paper":
        return PAPER_GRID
    return value


def _finite_pairs(value: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
    if not all(math.isfinite(x) for pair in value for x in pair):
        raise ValueError("every alpha and beta must be a finite number")
    return value


Grid = Annotated[tuple[tuple[float, float], ...], BeforeValidator(_grid), AfterValidator(_finite_pairs)]


@settings_type
@dataclass(frozen=True)
class ScoreSettings:
    """What the score stage's numbers depend on besides the model and the artifact."""

    add_bos: bool = True  # prepend the model's BOS so that every text token is predicted
    context_limit: Annotated[int, NotBool, Field(ge=2)] | None = None  # at most this many tokens of context
    allow_truncation: bool = False  # score the prefix that fits the model's context (flagged)
    grid: Grid = PAPER_GRID  # (alpha, beta) pairs re-thresholded from the stored LSD and LCL

    def record(self) -> dict[str, Any]:
        """By field name, the grid as lists (as JSON holds it)."""
        return {
            "add_bos": self.add_bos,
            "context_limit": self.context_limit,
            "allow_truncation": self.allow_truncation,
            "grid": [list(pair) for pair in self.grid],
        }


def field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def parse(cls: type[T], values: Mapping[str, Any], *, prefix: str = "", strict: bool = False) -> T:
    """``cls`` from the entries of ``values`` (plain data: a command converts its Hydra config once)
    that are its fields, validated; the first problem is one PipelineError, ``setting
    <prefix><key>=<value>: <what is wrong>``. ``strict``: every entry must be a field (a config group
    such as ``corpus``, where an unknown key is a typo)."""
    names = field_names(cls)
    if strict:
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise PipelineError(f"setting {prefix}{unknown[0]}: no such setting (known: {', '.join(names)})")
    try:
        return TypeAdapter(cls).validate_python({k: v for k, v in values.items() if k in names})
    except ValidationError as exc:
        raise PipelineError(validation_message(exc, values, prefix)) from None


def flag(value: Any, name: str) -> bool:
    """The true/false setting ``name`` of a command's config, read as ``parse`` reads a bool field
    (``progress=no`` is False, ``progress=maybe`` an error), never by Python's truth (any text is True)."""
    try:
        return TypeAdapter(bool).validate_python(value)
    except ValidationError as exc:
        raise PipelineError(f"setting {name}={value!r}: {exc.errors()[0]['msg']}") from None


def parse_group(cls: type[T], values: Mapping[str, Any], group: str) -> T:
    """A config group of ``values`` (``model``, ``evaluator``, ``corpus``: a mapping of its own keys)
    as ``cls``, strictly: an unknown key of the group is a typo, ``setting <group>.<key>: ...``."""
    return parse(cls, values.get(group) or {}, prefix=f"{group}.", strict=True)
