"""The drop-in ``pipeline.api.dropin.compute_longppl`` against the official package's ``compute_longppl``,
online (evaluator and evaluated model, as its users call it), on the same documents and models, each
call in its own watched subprocess (``bench.compare_tasks``): wall time, peak memory, agreement.

Both get the models as a migrating user holds them (transformers' default attention, ``sdpa``), so
the difference is the computation: this project's output head in bounded blocks and batched short
windows, against full-vocabulary logits for every position.
"""

from __future__ import annotations

from typing import Any

HEAD = [
    "| document | LongPPL ours / official | PPL ours / official | key tokens ours / official | max rel. diff "
    "| time ours / official (s) | ratio | peak ours / official (GB) | ratio |",
    "|---|---|---|---|---:|---|---:|---|---:|",
]


def row(doc: int, ours: dict, theirs: dict) -> tuple[str, float]:
    """The table row of one document and the largest relative difference of PPL and LongPPL."""
    rel = max(
        abs(ours["ppl"] / theirs["ppl"] - 1),
        abs((ours["longppl"] or 1) / (theirs["longppl"] or 1) - 1),
    )
    longppl = (
        "n/a"
        if ours["longppl"] is None
        else f"{ours['longppl']:.5f} / {theirs['longppl'] or float('nan'):.5f}"
    )
    text = (
        f"| {doc} | {longppl} | {ours['ppl']:.5f} / {theirs['ppl']:.5f} | {ours['n_key']} / {theirs['n_key']} "
        f"| {rel:.1e} | {ours['seconds']:.1f} / {theirs['seconds']:.1f} | {ours['seconds'] / theirs['seconds']:.2f} "
        f"| {ours['process_peak_gb']:.2f} / {theirs['process_peak_gb']:.2f} "
        f"| {ours['process_peak_gb'] / theirs['process_peak_gb']:.2f} |"
    )
    return text, rel


def compare_dropin(jobs: Any, docs: list[int], K: int, d: int) -> tuple[list[str], dict]:
    """The section of the report and its summary ratios (sums of times, maxima of peaks)."""
    lines = [
        "## Drop-in `compute_longppl`: `pipeline.api.dropin` against the official package",
        "",
        f"GovReport sample documents {docs}, 4096 Gemma tokens each; online mode (Gemma 3 270M finds the "
        f"key tokens, SmolLM2-135M is scored), trunc_len={K}, sliding_window={d}, alpha=2, beta=-2, float32, "
        "CPU; both given the same model objects (attention `sdpa`). Peak: the whole process, models included.",
        "",
        *HEAD,
    ]
    time_ours = time_theirs = peak_ours = peak_theirs = 0.0
    worst = 0.0
    for doc in docs:
        job = {"tokens": 4096, "doc": doc, "K": K, "d": d}
        ours = jobs.run({**job, "task": "dropin-ours"})
        theirs = jobs.run({**job, "task": "dropin-official"})
        if "failed" in ours or "failed" in theirs:
            lines.append(
                f"| {doc} | ours: {ours.get('failed', 'ok')}; official: {theirs.get('failed', 'ok')} |"
            )
            continue
        text, rel = row(doc, ours, theirs)
        lines.append(text)
        worst = max(worst, rel)
        jobs.lost(f"drop-in time on document {doc}", ours["seconds"], theirs["seconds"])
        time_ours, time_theirs = time_ours + ours["seconds"], time_theirs + theirs["seconds"]
        peak_ours = max(peak_ours, ours["process_peak_gb"])
        peak_theirs = max(peak_theirs, theirs["process_peak_gb"])
    summary = {
        "dropin_time_ratio": time_ours / time_theirs if time_theirs else None,
        "dropin_memory_ratio": peak_ours / peak_theirs if peak_theirs else None,
        "dropin_max_rel_diff": worst,
    }
    return lines, summary
