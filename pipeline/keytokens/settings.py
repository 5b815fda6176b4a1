"""The settings of a keytokens run: evaluator, corpus, definition, compute, documents and output,
typed and checked once from the Hydra config (``conf/keytokens.yaml``), before any model loads."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import torch
from pydantic import Field
from pydantic.dataclasses import dataclass

from pipeline.definition import KeyTokenDefinition, Positive
from pipeline.errors import PipelineError
from pipeline.models.loading import ModelChoice
from pipeline.settings import Compute, DirectoryName, directory_name, parse
from pipeline.text.corpus import CorpusSpec

# The stage's compute defaults (``conf/keytokens.yaml``): the head in float32 on CUDA, since LSD near
# alpha decides which tokens are key.
STAGE_COMPUTE = Compute(head_dtype="auto")


@dataclass(frozen=True)
class Documents:
    """Which documents a run scores and how the evaluator reads them."""

    max_tokens: Positive | None = None  # truncate longer documents (recorded per document)
    min_tokens: Annotated[int, Field(ge=0)] = 0  # skip shorter documents (recorded)
    num_documents: Positive | None = None  # the first N eligible documents; None: all
    add_bos: bool = True  # BOS before the long pass


@dataclass(frozen=True)
class Output:
    name: DirectoryName | None = None  # the artifact's directory name; None: derived
    output_dir: str = "artifacts/keytokens"
    progress: bool = True


@dataclass(frozen=True)
class KeyTokenSettings:
    evaluator: ModelChoice
    corpus: CorpusSpec
    definition: KeyTokenDefinition
    compute: Compute
    documents: Documents
    output: Output

    @classmethod
    def from_config(cls, plain: Mapping[str, Any]) -> KeyTokenSettings:
        """The settings of ``conf/keytokens.yaml`` (composed, overrides applied, as plain data), typed and
        checked."""
        settings = cls(
            evaluator=ModelChoice.parse(plain.get("evaluator") or {}, "evaluator."),
            corpus=CorpusSpec.parse(plain.get("corpus") or {}),
            definition=parse(KeyTokenDefinition, plain),
            compute=parse(Compute, plain),
            documents=parse(Documents, plain),
            output=parse(Output, plain),
        )
        if settings.compute.device.startswith("cuda") and not torch.cuda.is_available():
            raise PipelineError(
                f"device={settings.compute.device} but no CUDA GPU is visible (preset=paper and preset=long "
                f"ask for one): pass device=cpu to run on the CPU anyway (in dtype={settings.compute.dtype}: "
                "slow, and its rounding is not a GPU's)"
            )
        max_tokens, K = settings.documents.max_tokens, settings.definition.K
        if max_tokens is not None and max_tokens < K:
            raise PipelineError(
                f"setting max_tokens={max_tokens} is below K={K}: no token would have a short "
                "context; raise max_tokens or lower K"
            )
        return settings

    def artifact_name(self) -> str:
        """``name``, or ``<corpus>--<evaluator>--K<K>-d<d>[-max<max_tokens>]``."""
        if self.output.name:
            return self.output.name
        evaluator = Path(self.evaluator.spec).name.removesuffix(".gguf").replace("/", "--")
        max_tokens = self.documents.max_tokens
        limit = f"-max{max_tokens}" if max_tokens else ""
        name = f"{self.corpus.name}--{evaluator}--K{self.definition.K}-d{self.definition.d}{limit}"
        return directory_name(name)

    def artifact_dir(self) -> Path:
        return Path(self.output.output_dir).absolute() / self.artifact_name()
