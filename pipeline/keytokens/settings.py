"""The settings of a keytokens run, typed and built once from its Hydra config (``conf/keytokens.yaml``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any

from omegaconf import OmegaConf
from pydantic import Field, TypeAdapter, ValidationError

from pipeline.corpus import CorpusSpec
from pipeline.errors import PipelineError
from pipeline.models import ModelChoice

# The settings the artifact's numbers depend on, recorded in its manifest under these names.
RESULT_SETTINGS = (
    "K",
    "d",
    "alpha",
    "beta",
    "gamma",
    "max_tokens",
    "min_tokens",
    "num_documents",
    "dtype",
    "add_bos",
    "short_window_bos",
)


# Field constraints, checked when the settings are built (before any model loads).
Positive = Annotated[int, Field(gt=0)]
Finite = Annotated[float, Field(allow_inf_nan=False)]
DirectoryName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9._+@=-]*$", max_length=200)]


@dataclass(frozen=True)
class KeyTokenSettings:
    evaluator: ModelChoice
    corpus: CorpusSpec
    K: Positive  # short context length (paper Appendix A.1)
    d: Positive  # sliding-window step: one short pass of K + d tokens scores d tokens
    alpha: Finite  # key token: LSD > alpha ...
    beta: Finite  # ... and LCL > beta
    gamma: Annotated[float, Field(ge=1, allow_inf_nan=False)]  # soft weight: min(exp(LSD), gamma)
    max_tokens: Positive | None  # truncate longer documents (recorded per document)
    min_tokens: Annotated[int, Field(ge=0)]  # skip shorter documents (recorded)
    num_documents: Positive | None  # the first N eligible documents; None: all
    add_bos: bool  # BOS before the long pass
    short_window_bos: bool  # and before every short window
    dtype: str
    device: str
    head_dtype: str  # auto (float32 on CUDA), model or float32: the output head's dtype
    head_chunk: Positive
    vocab_tile: Positive | None
    window_batch_tokens: Positive
    cache_dir: str | None
    progress: bool
    name: DirectoryName | None  # the artifact's directory name; None: derived
    output_dir: str

    @classmethod
    def from_config(cls, cfg: Any) -> KeyTokenSettings:
        """The settings of ``conf/keytokens.yaml`` (composed, overrides applied), typed and checked."""
        plain = OmegaConf.to_container(cfg, resolve=True)
        names = {f.name for f in fields(cls)}
        try:
            settings = TypeAdapter(cls).validate_python({k: v for k, v in plain.items() if k in names})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise PipelineError(f"setting {where}={first.get('input')!r}: {first['msg']}") from None
        if settings.max_tokens is not None and settings.max_tokens < settings.K:
            raise PipelineError(
                f"setting max_tokens={settings.max_tokens} is below K={settings.K}: no token would have a "
                "short context; raise max_tokens or lower K"
            )
        return settings

    def result_settings(self) -> dict[str, Any]:
        """The settings the numbers depend on, by name (the manifest's ``settings``, in part)."""
        return {k: getattr(self, k) for k in RESULT_SETTINGS}

    def artifact_name(self) -> str:
        """``name``, or ``<corpus>--<evaluator>--K<K>-d<d>[-max<max_tokens>]``."""
        if self.name:
            return self.name
        evaluator = Path(self.evaluator.spec).name.removesuffix(".gguf").replace("/", "--")
        limit = f"-max{self.max_tokens}" if self.max_tokens else ""
        name = f"{self.corpus.name}--{evaluator}--K{self.K}-d{self.d}{limit}"
        return re.sub(r"[^A-Za-z0-9._+@=-]+", "_", name).lstrip(".")  # one plain directory name

    def artifact_dir(self) -> Path:
        return Path(self.output_dir).absolute() / self.artifact_name()
