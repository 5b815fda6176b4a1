"""Which documents a keytokens run scores, the exact text and evaluator tokens of each, and the
settings record (the manifest's ``settings``) and fingerprint they give."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import torch
from pydantic import Field
from pydantic.dataclasses import dataclass as settings_dataclass

from pipeline.artifact.schema import settings_fingerprint
from pipeline.definition import KeyTokenDefinition, Positive
from pipeline.errors import PipelineError, settings_type
from pipeline.models import compilation
from pipeline.models.loading import LoadedModel, dtype_name, resolve_head_dtype
from pipeline.models.placement import gpu_record
from pipeline.provenance import library_versions, text_sha256
from pipeline.settings import Compute
from pipeline.text.corpus import CorpusSpec, Document
from pipeline.text.tokenization import encode_truncated

# The stage's compute defaults (``conf/keytokens.yaml``): the head in float32 on CUDA, since LSD near
# alpha decides which tokens are key.
STAGE_COMPUTE = Compute(head_dtype="auto")


@settings_type
@settings_dataclass(frozen=True)
class Documents:
    """Which documents a run scores and how the evaluator reads them."""

    max_tokens: Positive | None = None  # truncate longer documents (recorded per document)
    min_tokens: Annotated[int, Field(ge=0)] = 0  # skip shorter documents (recorded)
    num_documents: Positive | None = None  # the first N eligible documents; None: all
    add_bos: bool = True  # BOS before the long pass

    def choose(
        self, docs: list[Document], tokenizer: Any, context: int | None, K: int, corpus: str
    ) -> tuple[list[Prepared], list[dict[str, str]]]:
        """The documents a run scores, tokenized and truncated by the evaluator's ``tokenizer`` within
        its ``context`` (None: unknown), and the documents it skips with their reasons. Only the
        tokenizer is needed: stage 1's plan chooses them before any task loads the evaluator's weights."""
        bos = int(self.add_bos and tokenizer.bos_token_id is not None)
        if self.max_tokens is not None and context is not None and self.max_tokens + bos > context:
            raise PipelineError(
                f"max_tokens={self.max_tokens} exceeds the evaluator's context of {context} tokens: "
                f"set max_tokens<={context - bos}"
            )
        prepared, skipped = self.prepare(docs, tokenizer, K, context, bos)
        if not prepared:
            raise PipelineError(f"no document of corpus '{corpus}' can be scored: {skipped[:3]}")
        return prepared, skipped

    def prepare(
        self, docs: list[Document], tokenizer: Any, K: int, context: int | None, n_bos: int
    ) -> tuple[list[Prepared], list[dict[str, str]]]:
        """Tokenize and truncate; return (documents to score, skipped documents with reasons).

        ``context`` is the evaluator's context length (None: unknown) and ``n_bos`` the number of
        tokens put before each document (0 or 1)."""
        prepared: list[Prepared] = []
        skipped: list[dict[str, str]] = []
        for doc in docs:
            if self.num_documents is not None and len(prepared) >= self.num_documents:
                break
            if not doc.text.strip():
                skipped.append({"doc_id": doc.id, "reason": "empty or whitespace-only text"})
                continue
            text, enc, truncated = encode_truncated(tokenizer, doc.text, self.max_tokens)
            reason = _skip_reason(len(enc.ids), len(enc.ids) + n_bos, self.min_tokens, K)
            if reason:
                skipped.append({"doc_id": doc.id, "reason": reason})
                continue
            if context is not None and len(enc.ids) + n_bos > context:
                raise PipelineError(
                    f"document '{doc.id}' has {len(enc.ids) + n_bos} tokens, more than the evaluator's "
                    f"context of {context}: set max_tokens<={context - n_bos} to truncate (recorded per "
                    "document)"
                )
            index = len(prepared)
            prepared.append(Prepared(index, doc, text, enc.ids, enc.offsets, enc.offsets_from, truncated))
        return prepared, skipped


@dataclass
class Prepared:
    """A document ready for scoring: the exact text scored and its evaluator tokens."""

    index: int
    doc: Document
    text: str
    ids: np.ndarray
    offsets: np.ndarray
    offsets_from: str
    truncated: bool


@dataclass
class Selection:
    """The documents of a run, the settings record they give, and its fingerprint."""

    prepared: list[Prepared]
    skipped: list[dict[str, str]]
    record: dict[str, Any]
    fingerprint: str


def select(
    docs: list[Document],
    lm: LoadedModel,
    definition: KeyTokenDefinition,
    documents: Documents,
    corpus: CorpusSpec,
    compute: Compute,
    questions: dict[str, Any] | None = None,
    evaluator: dict[str, Any] | None = None,
) -> Selection:
    """The documents a run scores, within the evaluator's context, and the settings record (with a
    corpus's ``questions`` identity where it has questions: ``LoogleCorpus.identity``; ``evaluator``: the
    evaluator's record as the run knows it so far, default ``lm.source.provisional()``)."""
    prepared, skipped = documents.choose(docs, lm.tokenizer, lm.context_length, definition.K, corpus.name)
    sources = document_sources(prepared)
    record = settings_record(definition, documents, corpus, lm, compute, sources, evaluator)
    record |= {"questions": questions} if questions is not None else {}
    return Selection(prepared, skipped, record, settings_fingerprint(record))


def _skip_reason(n_tokens: int, n_seq: int, min_tokens: int, K: int) -> str | None:
    if n_tokens < min_tokens:
        return f"{n_tokens} tokens < min_tokens={min_tokens}"
    if n_seq <= K:
        return f"{n_tokens} tokens: no token has a short context (K={K})"
    return None


def settings_record(
    definition: KeyTokenDefinition,
    documents: Documents,
    corpus: CorpusSpec,
    lm: LoadedModel,
    compute: Compute,
    sources: list[dict[str, str]],
    evaluator: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest's ``settings``: what the numbers depend on, and where the inputs came from. The
    dtypes and the device type are the resolved ones (``dtype=auto`` runs in bfloat16 on CUDA and
    float32 on a CPU: a run resumed elsewhere must not mix them); the device index is not (tasks run
    on different GPUs of one kind), it is in the manifest's ``run``. A 16-bit or GPU run records what
    else its numbers depend on (``numerics_record``). The evaluator as far as it is known without
    waiting for its weights' hashes (``ModelSource.provisional``; the stage settles them at its end)."""
    head_dtype = resolve_head_dtype(compute.head_dtype, lm.dtype, lm.device)
    return {
        **numerics_record(lm, compute, head_dtype),
        **definition.record(),
        "max_tokens": documents.max_tokens,
        "min_tokens": documents.min_tokens,
        "num_documents": documents.num_documents,
        "add_bos": documents.add_bos,
        "dtype": dtype_name(lm.dtype),
        "device": lm.device.type,
        "head_dtype": dtype_name(head_dtype),
        "evaluator": evaluator if evaluator is not None else lm.source.provisional(),
        "corpus": corpus.record(),
        "documents": sources,
        "libraries": {k: v for k, v in library_versions().items() if k in ("torch", "transformers")},
    }


def document_sources(prepared: list[Prepared]) -> list[dict[str, str]]:
    """The settings record's ``documents``: each document's id and its source text's sha256."""
    return [{"doc_id": p.doc.id, "source_sha256": p.doc.sha256} for p in prepared]


def numerics_record(lm: LoadedModel, compute: Compute, head_dtype: torch.dtype) -> dict[str, Any]:
    """``numerics``: what the numbers of a run in a 16-bit dtype or on a GPU depend on beyond its
    settings, so that a run resumed with other kernels stops (``ArtifactWriter``) instead of mixing
    them. In 16 bits the head's blocks and the window batches are GEMM shapes, which round
    differently (0.06 nats per bfloat16 ulp of a logit of 8 to 16, against LSD thresholds), and a
    compiled body (``compile``, only where it is compiled) sums in other orders; on a GPU the GPU's
    name, CUDA and cuBLAS's reductions choose the kernels (``gpu_record``). A CPU run in float32 or
    float64 records none of it (its blocks move log-probs by float32 rounding at most,
    tests/keytokens/test_numerics_record.py), so its fingerprint is unchanged."""
    sixteen_bit = min(lm.dtype.itemsize, head_dtype.itemsize) < 4
    gpu = gpu_record(lm.model)
    if not (sixteen_bit or gpu):
        return {}
    return {"numerics": {**compute.record(), **compilation.record(lm.model), **gpu}}


def document_records(prepared: list[Prepared]) -> list[dict[str, Any]]:
    """The manifest's record of each document: id, hashes of the text scored and of its source,
    evaluator token count, truncation, and the text's length in the corpus's reference tokens where
    the corpus was selected in them (``corpus.tokenized_with``)."""
    return [
        {
            "doc_id": p.doc.id,
            "sha256": text_sha256(p.text),
            "source_sha256": p.doc.sha256,
            "n_tokens": len(p.ids),
            "truncated": p.truncated,
            **({"reference_tokens": p.doc.reference_tokens} if p.doc.reference_tokens is not None else {}),
        }
        for p in prepared
    ]
