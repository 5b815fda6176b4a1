"""`make finetune`'s two lines: what it is about to train (model, loss, sequences, where), and what it
trained (steps, time, the final checkpoint)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def start_line(spec: str, source: str, data: dict[str, Any], run_dir: Path) -> str:
    loss = "CE" if source == "ce" else f"LongCE({source})"
    return (
        f"fine-tuning {spec} with {loss} on {data['sequences']} sequences of up to "
        f"{data['max_length']} tokens ({data['truncated']} truncated, {len(data['skipped'])} skipped) "
        f"-> {run_dir}"
    )


def finish_line(record: dict[str, Any], run_dir: Path) -> str:
    return f"finished {record['steps']} steps in {record['wall_seconds']:.0f} s: {run_dir / 'final'}"
