"""Where the parts of a loaded model compute: one device, or a device map (accelerate's hooks).

With ``device_map`` a model's modules may sit on different GPUs, and an offloaded module (``cpu``
or ``disk`` in the map) keeps its weights on the ``meta`` device between calls: its accelerate hook
loads them onto its *execution device* for each forward and moves the inputs there. Code that uses
a module's weights directly (the tiled output head in ``pipeline.models.logprobs``) must do the same:
``execution_device`` and ``loaded_weights`` here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from pipeline.errors import PipelineError


def _hooks(module: torch.nn.Module) -> list[Any]:
    hook = getattr(module, "_hf_hook", None)
    if hook is None:
        return []
    return list(getattr(hook, "hooks", [hook]))  # accelerate's SequentialHook holds several


def _as_device(device: Any) -> torch.device:
    return torch.device("cuda", device) if isinstance(device, int) else torch.device(device)


def execution_device(module: torch.nn.Module) -> torch.device:
    """The device ``module`` computes on: its accelerate hook's execution device when the model was
    dispatched with a device map, else the device of its first parameter (CPU if it has none)."""
    for hook in _hooks(module):
        device = getattr(hook, "execution_device", None)
        if device is not None:
            return _as_device(device)
    param = next(module.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


@contextmanager
def one_thread_on_cpu(device: torch.device) -> Iterator[None]:
    """Within this block, on the CPU, torch computes with one thread: for the checks' short forwards (a
    dozen tokens) at load. Split over OpenMP threads, each of their few hundred small products waits at
    a barrier for every thread, and where other processes share the cores a descheduled thread stalls
    them all: on 2 shared cores (load average 4) Gemma 3 270M's self-check took 3.1 s with 2 threads,
    0.7 s with one. Only the checks run so: they compare what they compute with itself (or count calls),
    and the thread count is set back after, before any text is scored."""
    if device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _on_meta(module: torch.nn.Module) -> bool:
    return any(p.device.type == "meta" for p in module.parameters(recurse=False))


@contextmanager
def loaded_weights(module: torch.nn.Module) -> Iterator[None]:
    """Within this block ``module``'s own weights are real tensors: an offloaded module (weights on
    ``meta``) is loaded onto its execution device by its accelerate hook, and offloaded again after."""
    if not _on_meta(module):
        yield
        return
    hook = getattr(module, "_hf_hook", None)
    if hook is None:
        raise PipelineError(
            f"the weights of {type(module).__name__} are on the meta device and nothing loads them: "
            "load the model with a device_map (accelerate offloads and reloads them) or without empty weights"
        )
    hook.pre_forward(module)
    try:
        if _on_meta(module):
            raise PipelineError(
                f"the accelerate hook of {type(module).__name__} left its weights on the meta device: "
                "load the model without offloading its output head (device_map without 'disk' for lm_head)"
            )
        yield
    finally:
        hook.post_forward(module, None)


def from_pretrained_placement(
    device: torch.device, device_map: Any | None, gpus: list[int] | None
) -> dict[str, Any]:
    """``from_pretrained`` arguments that put the model where it will run. A device map shards it
    over ``gpus`` (one slice per data-parallel rank; None: every visible GPU) within ``max_memory``;
    one CUDA device gets ``device_map={"": device}``, so the weights go straight to the GPU instead
    of through host memory; on the CPU nothing (the model is loaded there)."""
    if device_map:
        kwargs: dict[str, Any] = {"device_map": device_map}
        if gpus is None and torch.cuda.is_available():
            gpus = list(range(torch.cuda.device_count()))
        if gpus:
            kwargs["max_memory"] = max_memory(gpus)
        return kwargs
    if device.type == "cuda":
        return {"device_map": {"": str(device)}}
    return {}


GPU_HEADROOM = 0.10  # of each GPU's total memory kept free of weights, and at least
GPU_HEADROOM_MIN = 2 * 2**30  # bytes
HOST_SHARE = 0.90  # of the host's available memory offered to offloaded layers


def max_memory(gpus: list[int]) -> dict[int | str, int]:
    """accelerate's budget for a device map over ``gpus`` (a rank's slice): each GPU's free memory less
    a headroom of 10% of its total (8 GiB of an 80 GiB H100; at least 2 GiB) for the CUDA context,
    NCCL, the caching allocator and the activations of a 32k-token forward (a 72B model's MLP alone
    holds about 6 GiB), and ``cpu``: the slice's share of 90% of the host's available memory, so that
    layers that do not fit go to host memory before the disk. A dict without ``cpu`` gets no CPU
    tier from accelerate: what does not fit goes straight to disk."""
    import psutil

    budget: dict[int | str, int] = {}
    for g in gpus:
        free, total = torch.cuda.mem_get_info(g)
        budget[g] = max(0, free - max(int(total * GPU_HEADROOM), GPU_HEADROOM_MIN))
    share = len(gpus) / max(torch.cuda.device_count(), len(gpus), 1)
    budget["cpu"] = int(psutil.virtual_memory().available * HOST_SHARE * share)
    return budget


def describe(model: Any, device: torch.device) -> str:
    """Where the model runs, with device indices: ``cpu``, ``cuda:0``, or the devices of its device
    map in the map's order (``cuda:0,cuda:1,cpu,disk``)."""
    mapping = getattr(model, "hf_device_map", None)
    if not mapping:
        return str(device)
    places = ["disk" if d == "disk" else str(_as_device(d)) for d in mapping.values()]
    return ",".join(dict.fromkeys(places))


def gpu_record(model: torch.nn.Module) -> dict[str, Any]:
    """What a model's GPU numbers depend on beyond the settings and the library versions: the GPUs
    it runs on (their names: kernels and rounding differ between models of GPU), the CUDA version and
    cuBLAS's reduction settings. Empty for a model with no weights on a GPU (the CPU's record is
    unchanged)."""
    devices = {p.device for p in model.parameters() if p.device.type == "cuda"}
    for hook in (getattr(m, "_hf_hook", None) for m in model.modules()):
        device = getattr(hook, "execution_device", None)
        if device is not None and _as_device(device).type == "cuda":
            devices.add(_as_device(device))
    if not devices:
        return {}
    matmul = torch.backends.cuda.matmul
    return {
        "gpus": sorted({torch.cuda.get_device_name(d) for d in devices}),
        "cuda": torch.version.cuda,
        "matmul": {
            "allow_tf32": matmul.allow_tf32,
            "allow_bf16_reduced_precision_reduction": matmul.allow_bf16_reduced_precision_reduction,
            "allow_fp16_reduced_precision_reduction": matmul.allow_fp16_reduced_precision_reduction,
        },
    }
