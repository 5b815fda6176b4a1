"""``compile=``: a model's decoder layers under ``torch.compile``, a compute setting (off, on, auto).

Each decoder layer is compiled on its own (``nn.Module.compile``), so one graph serves every layer of a
shape: on an H200 the 8B shape's 32 layers gave 3 graphs for stage 1 and no graph break. A compiled body
sums in other orders, so its log-probs move by the rounding of its dtype: a run records it (``record``:
the manifest's ``numerics``, a results line's settings) wherever it records the head blocks, and a
default that leaves the model eager records nothing.

``auto`` compiles where the compile repays itself (``wanted``): stage 1 on CUDA with at least
``AUTO_MIN_TEXTS`` texts. Measured on one H200 at the 8B shape and 32767 tokens (``make bench-gpu``,
docs/reports/gpu.md): compiled, a text took 4.89 s against 5.79 s eager (0.89 s saved); the run with an
empty compile cache paid 16.8 s more before its steady texts (the compile's set-up at load, the
self-check's and the first text's shapes compiled), a run with the cache warm 3.2 s: repaid after 19
texts, or 4. Stage 2 saved 0.17 s per text against 9.4 s more with the cache warm (57 texts); on the
CPU the compile cost 80 CPU s for Gemma 3 270M and a warm cache saved 7%, within one run's noise:
``auto`` leaves both eager. The compiled kernels are kept in the cache
folder (``kernel_cache``: ``<cache_dir>/compile``, torch's ``TORCHINDUCTOR_CACHE_DIR`` unless it is
set), so only the first run on a machine pays the whole compile.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from pipeline.errors import PipelineError

AUTO_MIN_TEXTS = 20
KERNEL_CACHE = "compile"  # under the cache folder


def wanted(setting: str, device: torch.device, texts: int | None, device_map: bool = False) -> bool:
    """Whether ``compile=setting`` compiles a model on ``device`` that scores ``texts`` texts (None: a
    run that does not say, which ``auto`` leaves eager); ``auto`` leaves a model spread by a device
    map eager (its accelerate hooks run inside every layer)."""
    if setting != "auto":
        return setting == "on"
    return device.type == "cuda" and texts is not None and texts >= AUTO_MIN_TEXTS and not device_map


def decoder_layers(model: Any) -> list[torch.nn.Module]:
    """The decoder layers of a causal LM (``model.get_decoder().layers``), a PipelineError where it has
    no such list."""
    body = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "base_model", None)
    layers = getattr(body, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise PipelineError(
            f"compile=on: {type(model).__name__} has no list of decoder layers to compile: use compile=off"
        )
    return list(layers)


def kernel_cache(cache_dir: Path) -> Path:
    """Where torch keeps the compiled kernels: ``TORCHINDUCTOR_CACHE_DIR`` when it is set, else
    ``<cache_dir>/compile`` (set for torch, which reads it at each compile)."""
    folder = os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(cache_dir) / KERNEL_CACHE))
    return Path(folder)


def compile_layers(model: Any, cache_dir: Path) -> None:
    """Each decoder layer of ``model`` under ``torch.compile`` (torch's default mode and shapes: each
    new shape compiles at its first forward, read from ``kernel_cache`` where it holds it)."""
    kernel_cache(cache_dir)
    for layer in decoder_layers(model):
        if not is_compiled(layer):
            layer.compile()


def is_compiled(module: Any) -> bool:
    """Whether ``module`` (a model, or one layer) runs a layer under ``torch.compile``."""
    modules = module.modules() if isinstance(module, torch.nn.Module) else ()
    return any(getattr(m, "_compiled_call_impl", None) is not None for m in modules)


def record(model: Any) -> dict[str, str]:
    """What a run records of it: ``{"compile": "on"}`` for a compiled model, nothing for an eager one."""
    return {"compile": "on"} if is_compiled(model) else {}
