"""The settings of a keytokens run, typed and built once from its Hydra config (``conf/keytokens.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from pydantic import TypeAdapter, ValidationError

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


@dataclass(frozen=True)
class KeyTokenSettings:
    evaluator: ModelChoice
    corpus: CorpusSpec
    K: int  # short context length (paper Appendix A.1)
    d: int  # sliding-window step: one short pass of K + d tokens scores d tokens
    alpha: float  # key token: LSD > alpha ...
    beta: float  # ... and LCL > beta
    gamma: float  # soft weight: min(exp(LSD), gamma)
    max_tokens: int | None  # truncate longer documents (recorded per document)
    min_tokens: int  # skip shorter documents (recorded)
    num_documents: int | None  # the first N eligible documents; None: all
    add_bos: bool  # BOS before the long pass
    short_window_bos: bool  # and before every short window
    dtype: str
    device: str
    head_dtype: str  # auto (float32 on CUDA), model or float32: the output head's dtype
    head_chunk: int
    vocab_tile: int | None
    window_batch_tokens: int
    cache_dir: str | None
    progress: bool
    name: str | None  # the artifact's directory name; None: derived
    output_dir: str

    @classmethod
    def from_config(cls, cfg: Any) -> KeyTokenSettings:
        """The settings of ``conf/keytokens.yaml`` (composed, overrides applied), typed and checked."""
        plain = OmegaConf.to_container(cfg, resolve=True)
        names = {f.name for f in fields(cls)}
        try:
            return TypeAdapter(cls).validate_python({k: v for k, v in plain.items() if k in names})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise PipelineError(f"setting {where}={first.get('input')!r}: {first['msg']}") from None

    def result_settings(self) -> dict[str, Any]:
        """The settings the numbers depend on, by name (the manifest's ``settings``, in part)."""
        return {k: getattr(self, k) for k in RESULT_SETTINGS}

    def artifact_name(self) -> str:
        """``name``, or ``<corpus>--<evaluator>--K<K>-d<d>[-max<max_tokens>]``."""
        if self.name:
            return self.name
        evaluator = Path(self.evaluator.spec).name.removesuffix(".gguf").replace("/", "--")
        limit = f"-max{self.max_tokens}" if self.max_tokens else ""
        return f"{self.corpus.name}--{evaluator}--K{self.K}-d{self.d}{limit}"

    def artifact_dir(self) -> Path:
        return Path(self.output_dir).absolute() / self.artifact_name()
