"""`make finetune` (issue #11): fine-tune a causal LM with LongCE or plain CE, on Hugging Face ``Trainer``.

The loss is ``pipeline.longce.LongCE`` behind ``Trainer.compute_loss``; everything else (devices,
data parallelism, DeepSpeed ZeRO, mixed precision, gradient accumulation and checkpointing,
optimizer, schedule, saving and resuming) is the Trainer's, configured with its own argument names
under ``training.`` (``conf/finetune.yaml``). Run as ``python -m pipeline.finetune [key=value ...]``,
or with ``torchrun`` / ``accelerate launch`` for several GPUs.

Writes ``<output_dir>/<name>/``: the Trainer's ``checkpoint-<step>/`` folders, ``metrics.jsonl``
(one line per logged step: the objective, the plain CE of the same tokens, the weights' mean and
maximum and the share at the cap, learning rate), ``run.json`` (settings, model, corpus and
artifact hashes, library versions) and ``final/`` (the model, its tokenizer and
``longppl-finetune.json``), which `make score MODEL=<that folder>` scores.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf
from transformers import Trainer, TrainerCallback, TrainingArguments

from pipeline import __version__
from pipeline.artifacts import HUB_PREFIX, load_artifact, locate_artifact
from pipeline.cli import hydra_main
from pipeline.corpus import CorpusSpec, load_corpus
from pipeline.errors import PipelineError
from pipeline.files import write_json_atomic
from pipeline.finetune_data import RightPadCollator, SequenceDataset, TrainingSequence, build_sequences
from pipeline.longce import ArtifactWeights, LongCE, LongCEOutput, LongCESettings
from pipeline.models import ModelChoice, is_local_model
from pipeline.provenance import library_versions

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
        for key, value in out.stats(self.longce.settings.gamma).items():
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


# ----------------------------------------------------------------------------------------------
# The command


def longce_settings(cfg: Any, tokenizer: Any) -> LongCESettings:
    bos = tokenizer.bos_token_id if cfg.short_window_bos else None
    return LongCESettings(
        source=str(cfg.source),
        K=int(cfg.K),
        d=int(cfg.d),
        gamma=float(cfg.gamma),
        window_bos_id=None if bos is None else int(bos),
        head_chunk=int(cfg.head_chunk),
        vocab_tile=cfg.vocab_tile,
        window_batch_tokens=int(cfg.window_batch_tokens),
    )


def run_name(cfg: Any) -> str:
    if cfg.name:
        return str(cfg.name)
    spec = str(cfg.model.spec)
    model = cfg.model.get("name") or (Path(spec).stem if spec.endswith(".gguf") else Path(spec).name)
    loss = "ce" if cfg.source == "ce" else f"longce-{cfg.source}"
    if cfg.source == "self":
        loss += f"-K{cfg.K}-d{cfg.d}-g{cfg.gamma:g}"
    return f"{cfg.corpus.name}--{model}--{loss}"


def load_training_data(cfg: Any, lm: Any):
    """Corpus documents, the artifact's weights when asked, and the training sequences."""
    spec = CorpusSpec.from_config(cfg.corpus)
    docs = load_corpus(spec)
    if cfg.num_documents is not None:
        docs = docs[: int(cfg.num_documents)]
    weights, artifact_record = None, None
    if cfg.source == "artifact":
        weights, artifact_record = load_artifact_weights(cfg)
    max_length = int(cfg.max_length) if cfg.max_length is not None else lm.context_length
    if max_length is None:
        raise PipelineError(f"{cfg.model.spec} does not state its context length: set max_length=<tokens>")
    if lm.context_length is not None and max_length > lm.context_length:
        raise PipelineError(
            f"max_length={max_length} exceeds {cfg.model.spec}'s context of {lm.context_length} tokens: set "
            f"max_length<={lm.context_length}, or extend the model's context first (rope_scaling in its "
            "config.json, as the paper's PI and EABF do) and pass that checkpoint"
        )
    sequences, skipped = build_sequences(
        docs, lm.tokenizer, max_length=max_length, add_bos=bool(cfg.add_bos),
        min_tokens=int(cfg.min_tokens), weights=weights,
    )  # fmt: skip
    corpus = {
        "spec": spec.__dict__,
        "documents": [{"doc_id": d.id, "sha256": d.sha256} for d in docs],
        "skipped": skipped,
        "sequences": len(sequences),
        "truncated": sum(s.truncated for s in sequences),
        "max_length": max_length,
        "tokens": sum(len(s.input_ids) for s in sequences),
    }
    return sequences, corpus, artifact_record


def load_artifact_weights(cfg: Any) -> tuple[ArtifactWeights, dict[str, Any]]:
    if not cfg.artifact:
        raise PipelineError("source=artifact needs artifact=<artifact dir or hf://datasets/...>")
    spec = str(cfg.artifact)
    path, where = locate_artifact(spec if spec.startswith(HUB_PREFIX) else str(Path(spec).absolute()))
    artifact = load_artifact(path)
    record = {"name": artifact.root.name, "fingerprint": artifact.manifest["fingerprint"], "source": where}
    record.update({k: artifact.settings.get(k) for k in ("K", "d", "gamma")})
    record["evaluator"] = artifact.settings["evaluator"]["spec"]
    return ArtifactWeights(artifact), record


def run(cfg: Any) -> dict[str, Any]:
    choice = ModelChoice.from_config(cfg.model)
    if is_local_model(choice.spec):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing to download: fail fast
    # Loaded on the CPU; the Trainer puts it on its device (each process its own GPU).
    lm = choice.load(dtype=cfg.dtype, device="cpu", cache_dir=cfg.get("cache_dir"))
    settings = longce_settings(cfg, lm.tokenizer)
    sequences, corpus, artifact = load_training_data(cfg, lm)
    run_dir = Path(str(cfg.output_dir)).absolute() / run_name(cfg)
    training = OmegaConf.to_container(cfg.training, resolve=True)
    if isinstance(training.get("deepspeed"), str):
        training["deepspeed"] = str(Path(training["deepspeed"]).absolute())
    args = training_arguments(run_dir, training, str(cfg.device), int(cfg.seed))
    record = {
        "name": run_dir.name,
        "loss": settings.__dict__,
        "model": lm.source.to_dict(),
        "dtype": str(lm.dtype).removeprefix("torch."),
        "corpus": corpus,
        "artifact": artifact,
        "training": training,
        "config": OmegaConf.to_container(cfg, resolve=True),
        "pipeline_version": __version__,
        "libraries": library_versions(),
    }
    loss = "CE" if settings.source == "ce" else f"LongCE({settings.source})"
    print(
        f"fine-tuning {cfg.model.spec} with {loss} "
        f"on {corpus['sequences']} sequences of up to {corpus['max_length']} tokens "
        f"({corpus['truncated']} truncated, {len(corpus['skipped'])} skipped) -> {run_dir}"
    )
    record = finetune(lm, sequences, settings, args, record, resume=cfg.resume)
    print(f"finished {record['steps']} steps in {record['wall_seconds']:.0f} s: {run_dir / 'final'}")
    return record


def main() -> None:
    hydra_main("finetune", run)


if __name__ == "__main__":
    main()
