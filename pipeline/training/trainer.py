"""Fine-tuning a causal LM with LongCE or plain CE on Hugging Face ``Trainer`` (`make finetune`).

The loss is ``pipeline.training.longce.LongCE`` behind ``Trainer.compute_loss``; everything else (devices,
data parallelism, DeepSpeed ZeRO, mixed precision, gradient accumulation and checkpointing,
optimizer, schedule, saving and resuming) is the Trainer's, configured with its own argument names
under ``training.`` (``conf/finetune.yaml``). The command is ``python -m pipeline.commands.finetune [key=value
...]``, or ``torchrun`` / ``accelerate launch`` with ``-m pipeline.commands.finetune`` for several GPUs.

Writes ``<output_dir>/<name>/``: the Trainer's ``checkpoint-<step>/`` folders, ``metrics.jsonl``
(one line per logged step: the objective, the plain CE of the same tokens, the weights' mean and
maximum and the share at the cap, learning rate), ``run.json`` (settings, model, corpus and
artifact hashes, library versions) and ``final/`` (the model, its tokenizer and
``longppl-finetune.json``), which `make score MODEL=<that folder>` scores.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from pipeline.errors import PipelineError
from pipeline.files import write_json_atomic
from pipeline.outputs import FolderKind, Output, check
from pipeline.training.longce import LongCE, LongCEOutput, LongCESettings
from pipeline.training.sequences import RightPadCollator, SequenceDataset, TrainingSequence

PROVENANCE = "longppl-finetune.json"


class LongCETrainer(Trainer):
    """``Trainer`` whose loss is LongCE (any weight source); logs the plain CE and weight statistics."""

    loss_is_scaled_for_ga = True  # compute_loss normalises by the tokens of the whole optimizer step

    def __init__(self, *args: Any, longce: LongCE, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if longce.settings.source == "self" and getattr(self, "is_fsdp_enabled", False):
            raise PipelineError(
                "LongCE(self) does not run under FSDP (its short passes call the model's body outside "
                "FSDP's root module): use DeepSpeed ZeRO-3 (training.deepspeed=conf/deepspeed/zero3.json)"
            )
        self.longce = longce
        self.sums: dict[str, float] = defaultdict(float)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out = self.longce(
            model,
            inputs["input_ids"],
            labels=inputs.get("labels"),
            weights=inputs.get("longce_weights"),
            scoring_model=self.accelerator.unwrap_model(model),
        )
        self.record(out)
        if num_items_in_batch is None:
            loss = (
                out.weighted_sum
                / max(out.n_tokens, 1)
                / getattr(self, "current_gradient_accumulation_steps", 1)
            )
        else:  # as Trainer's own loss: the mean over every target of the step, on every device
            loss = out.weighted_sum / num_items_in_batch
            if self.args.average_tokens_across_devices and self.args.world_size > 1:
                loss = loss * self.accelerator.num_processes
        return (loss, out) if return_outputs else loss

    def record(self, out: LongCEOutput) -> None:
        for key, value in out.stats(self.longce.settings.definition.gamma).items():
            if key == "weight_max":
                self.sums[key] = max(self.sums.get(key, 0.0), value)
            else:
                self.sums[key] += value

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self.sums:
            logs.update(self.pop_statistics())
        super().log(logs, start_time)

    def pop_statistics(self) -> dict[str, float]:
        """Since the last log, over all processes: plain CE, mean and max weight, shares."""
        keys = ("nll_sum", "weight_sum", "n_clamped", "n_upweighted", "n_tokens")
        sums = torch.tensor([self.sums[k] for k in keys], dtype=torch.float64, device=self.args.device)
        peak = torch.tensor([self.sums["weight_max"]], dtype=torch.float64, device=self.args.device)
        if self.args.world_size > 1:
            sums = self.accelerator.reduce(sums, reduction="sum")
            peak = self.accelerator.gather(peak).max()
        self.sums.clear()
        total = dict(zip(keys, sums.tolist(), strict=True))
        n = max(total["n_tokens"], 1.0)
        return {
            "ce": total["nll_sum"] / n,
            "weight_mean": total["weight_sum"] / n,
            "weight_max": float(peak.max()),
            "clamped_fraction": total["n_clamped"] / n,
            "upweighted_fraction": total["n_upweighted"] / n,
            "tokens": total["n_tokens"],
        }


class MetricsLog(TrainerCallback):
    """Appends every log of the main process to ``metrics.jsonl`` with the elapsed wall time."""

    def __init__(self, path: Path):
        self.path = path
        self.started = time.time()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            row = {"step": state.global_step, "seconds": round(time.time() - self.started, 2), **logs}
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(row, sort_keys=True) + "\n")


def training_arguments(run_dir: Path, training: dict[str, Any], device: str, seed: int) -> TrainingArguments:
    """The Trainer's arguments: ``training`` as given, with what this entry needs fixed."""
    fixed = {"output_dir": str(run_dir), "remove_unused_columns": False, "seed": seed}
    if device == "cpu":
        fixed["use_cpu"] = True
    try:
        return TrainingArguments(**{**training, **fixed})
    except (TypeError, ValueError) as exc:
        raise PipelineError(f"training arguments: {exc} (see transformers.TrainingArguments)") from exc


RECORD_FIELDS = {"name", "loss", "model", "training"}  # what a run's run.json holds, from its start


def foreign_folder(folder: Path) -> str | None:
    """Why ``folder`` is no fine-tuning run's folder: it holds files, but no ``run.json`` of one."""
    if next(folder.iterdir(), None) is None:
        return None
    try:
        record = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        record = None
    if isinstance(record, dict) and set(record) >= RECORD_FIELDS:
        return None
    return "a folder that holds no fine-tuning run (no run.json of one)"


RUN_FOLDER = FolderKind("runs' folders (new, empty, or a run's)", "`make finetune`", foreign_folder)


def check_output(run_dir: Path) -> None:
    """Where a run writes, checked before the model loads (``pipeline.outputs``): a new or empty folder,
    or a run's (resumed, or made anew), in no artifact's or model's folder, on a disk this process can
    write."""
    check(Output("output_dir", run_dir, RUN_FOLDER))


def finetune(
    lm: Any,
    sequences: list[TrainingSequence],
    settings: LongCESettings,
    args: TrainingArguments,
    record: dict[str, Any],
    resume: bool | str | None = None,
) -> dict[str, Any]:
    """Train ``lm.model`` in place on ``sequences``; write metrics, provenance and ``final/``."""
    run_dir = Path(args.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics = run_dir / "metrics.jsonl"
    pad = lm.tokenizer.pad_token_id
    pad = pad if pad is not None else (lm.tokenizer.eos_token_id or 0)
    trainer = LongCETrainer(
        model=lm.model,
        args=args,
        train_dataset=SequenceDataset(sequences),
        data_collator=RightPadCollator(int(pad)),
        callbacks=[MetricsLog(metrics)],
        longce=LongCE(settings),
    )
    if not resume and trainer.is_world_process_zero():
        metrics.unlink(missing_ok=True)
    record = {**record, "status": "running", "started_at": _now()}
    _write_record(trainer, run_dir / "run.json", record)
    started = time.time()
    result = trainer.train(resume_from_checkpoint=resume or None)
    final = run_dir / "final"
    trainer.save_model(str(final))
    record.update(
        status="finished",
        finished_at=_now(),
        wall_seconds=round(time.time() - started, 1),
        steps=trainer.state.global_step,
        train_metrics=result.metrics,
    )
    if trainer.is_world_process_zero():
        lm.tokenizer.save_pretrained(final)
    _write_record(trainer, run_dir / "run.json", record)
    _write_record(trainer, final / PROVENANCE, record)
    lm.model.eval()
    return record


def _write_record(trainer: Trainer, path: Path, record: dict[str, Any]) -> None:
    if trainer.is_world_process_zero():
        write_json_atomic(path, json.loads(json.dumps(record, default=str)))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
