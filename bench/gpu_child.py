"""The contenders of `make bench-gpu`, each run in its own process by ``bench.gpu`` (and ``bench.numerics``):

- ``stage1`` / ``stage2``: the project's own commands (``python -m pipeline.commands.keytokens`` /
  ``pipeline.score`` with the given overrides), unchanged, with a timer around the functions where
  their time goes: imports, the corpus, the model's load, the selection, the self-check, each text,
  the artifact's finalisation, the summary and pages;
- ``official``: the official ``longppl`` 0.3.0 ``find_key_token`` on each text of an artifact;
- ``plain``: a plain forward of the model with a float32 cross-entropy on each text (what a
  perplexity harness does).

Each writes one JSON line per phase to ``--events`` (``{"phase", "start", "end", "cpu"}``, seconds since
the epoch and CPU seconds of the whole process, every thread; ``text`` phases once per text, between
two device synchronisations) and its process's start, each phase timed by the runner's clock
(``bench.runner.Clock``). With ``--until-first-text`` it stops as the first text's computation starts
(``first text``: when, and the CPU seconds spent until then): the start-up alone (``bench.startup``).
Where the command compiles its model (``compile=on``, the pipeline's setting:
``pipeline.models.compilation``) what the compiler did is recorded at the end (``compile``: graphs, graph
breaks, the compile cache's hits).
``WORK`` and ``paths`` name the files of the GPU benches' work folder (``bench.gpu`` builds them,
``bench.gpu_levers`` reads them).
"""

from __future__ import annotations

import time

STARTED = time.time()  # before the imports: they are part of the start-up

import argparse  # noqa: E402
import contextlib  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

from bench.runner import Clock, cuda_sync, own_cpu, process_started  # noqa: E402

WORK = Path("artifacts/bench/gpu")  # the GPU benches' work folder, relative to the repository


def paths(work: Path, tokens: int) -> dict[str, Path]:
    """The files of a work folder: the evaluator, its tokenizer, the texts of ``tokens`` tokens, the
    artifacts and the phase records."""
    return {
        "model": work / "model",
        "tokenizer": work / "tokenizer",
        "dataset": work / f"govreport-test-tokenized-{tokens}",
        "keytokens": work / "keytokens",
        "events": work / "events",
        "compile_cache": work / "compile-cache",
    }


def paper_overrides(
    work: Path, tokens: int, texts: int, device: str, extra: list[str]
) -> dict[str, list[str]]:
    """The overrides of stage 1 (``preset=paper`` on the work folder's evaluator and texts, ``texts`` of
    them) and of stage 2 (that model scored against stage 1's artifact), as ``make bench-gpu`` runs them."""
    p = paths(work, tokens)
    name = f"paper{tokens}x{texts}"
    corpus = [f"corpus.dataset={p['dataset']}", f"corpus.tokenized_with={p['tokenizer']}"]
    corpus += [f"corpus.max_ids={tokens}", f"corpus.min_tokenized_len={min(tokens, 16384)}"]
    stage1 = ["preset=paper", "evaluator=llama3.1-8b", f"evaluator.spec={p['model']}", *corpus]
    stage1 += [f"output_dir={p['keytokens']}", "progress=false", f"device={device}", *extra]
    stage2 = [
        "model=local", f"model.spec={p['model']}", f"artifact={p['keytokens'] / name}", "dtype=bfloat16",
        f"device={device}", "add_bos=false", f"results={work / 'scores.jsonl'}", "progress=false",
    ]  # fmt: skip
    return {"stage1": stage1, "stage2": stage2}


class Events:
    """Phase records appended to a JSON Lines file as they end; with ``stop_at``, the process ends as
    that phase starts (its start and the CPU seconds until then recorded as ``first text``)."""

    def __init__(self, path: Path, stop_at: str | None = None):
        self.path, self.stop_at = path, stop_at
        self.write(phase="process", start=process_started(), end=STARTED)

    def write(self, **record) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase ``name`` (wall and CPU seconds), between two device synchronisations."""
        if name == self.stop_at:
            cuda_sync()
            self.write(phase="first text", start=time.time(), cpu=own_cpu())
            os._exit(0)  # nothing after the start-up is measured: no artifact, no results line
        with Clock(sync=cuda_sync, cpu=own_cpu) as clock:
            yield
        self.write(phase=name, start=clock.began, end=clock.ended, cpu=clock.cpu_s)

    def timed(self, owner, attr: str, phase: str) -> None:
        """Replace ``owner.attr`` by the same function, timed as ``phase``."""
        inner = getattr(owner, attr)

        @functools.wraps(inner)
        def wrapper(*args, **kwargs):
            with self.phase(phase):
                return inner(*args, **kwargs)

        setattr(owner, attr, wrapper)


def read_events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def before_first_text(events: list[dict]) -> dict:
    """Where the time before the first text's computation went, from one process's phase records: its
    wall and CPU seconds from the process's start, and each phase's (a phase that ran twice: summed;
    ``imports``' CPU seconds count from the process's start)."""
    start = next((e["start"] for e in events if e["phase"] == "process"), None)
    first = next((e for e in events if e["phase"] in ("text", "first text")), None)
    out: dict = {}
    if start is not None and first is not None:
        out["before_first_text_s"] = round(first["start"] - start, 3)
    if first is not None and "cpu" in first:
        out["before_first_text_cpu_s"] = round(first["cpu"], 3)
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    for e in events:
        if e["phase"] not in ("text", "first text", "torch peak") and "end" in e:
            wall[e["phase"]] = wall.get(e["phase"], 0.0) + e["end"] - e["start"]
            if e.get("cpu") is not None:
                cpu[e["phase"]] = cpu.get(e["phase"], 0.0) + e["cpu"]
    out["phases_s"] = {k: round(v, 3) for k, v in wall.items()}
    if cpu:
        out["phases_cpu_s"] = {k: round(v, 3) for k, v in cpu.items()}
    return out


def load_parts() -> list[tuple]:
    """The parts of a model's load, timed as phases of their own (inside "model load")."""
    from pipeline.models import attention, loading
    from pipeline.models.weight_hashes import WeightHashing

    return [
        (loading, "prepare", "load: model files checked"),
        (loading, "_load_tokenizer", "load: tokenizer"),
        (loading, "_from_pretrained", "load: from_pretrained"),
        (attention, "attention_dispatches", "load: attention probe"),
        (WeightHashing, "confirmed", "waiting for weight hashes (where the run records them)"),
    ]


def compile_facts() -> dict:
    """What torch's compiler did in this process: graphs compiled, graph breaks (and their first
    reasons), recompilations, and the compile cache's hits and misses."""
    from torch._dynamo.utils import counters

    breaks = counters["graph_break"]
    return {
        "unique_graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": sum(breaks.values()),
        "graph_break_reasons": [str(r)[:200] for r in list(breaks)[:3]],
        "frames_compiled": counters["frames"]["ok"],
        "fxgraph_cache_hit": counters["inductor"]["fxgraph_cache_hit"],
        "fxgraph_cache_miss": counters["inductor"]["fxgraph_cache_miss"],
    }


def stage1(events: Events, overrides: list[str]) -> None:
    from pipeline.artifact.writer import ArtifactWriter
    from pipeline.commands import keytokens as command
    from pipeline.jobs import keytokens as job
    from pipeline.keytokens import step
    from pipeline.keytokens.selection import Documents
    from pipeline.models.loading import ModelChoice
    from pipeline.models.logprobs import TargetScorer

    timed = [
        *load_parts(),
        (job.KeyTokensJob, "from_config", "settings"),
        (ModelChoice, "check", "model check"),
        (job, "load_corpus", "corpus"),
        (ModelChoice, "tokenizer", "tokenizer"),
        (Documents, "choose", "selection"),
        (ModelChoice, "load", "model load"),
        (TargetScorer, "check_against_full_forward", "self-check"),
        (step, "keytoken_tables", "text"),
        (ArtifactWriter, "finalize", "finalize"),
        (job, "statistics", "summary"),
        (job, "write_views", "pages"),
    ]
    run_command(events, command, "pipeline.commands.keytokens", timed, overrides)


def stage2(events: Events, overrides: list[str]) -> None:
    from pipeline.commands import score as command
    from pipeline.jobs import recipe
    from pipeline.jobs.score import ScoreJob
    from pipeline.models.loading import ModelChoice
    from pipeline.models.logprobs import TargetScorer
    from pipeline.results import score as lines
    from pipeline.score import engine

    timed = [
        *load_parts(),
        (ScoreJob, "from_config", "settings"),
        (ModelChoice, "check", "model check"),
        (recipe, "open_artifact", "artifact"),
        (ModelChoice, "load", "model load"),
        (TargetScorer, "check_against_full_forward", "self-check"),
        (engine, "sequence_logprobs", "text"),
        (lines, "score_row", "result"),
    ]
    run_command(events, command, "pipeline.commands.score", timed, overrides)


def run_command(events: Events, command, name: str, timed: list[tuple], overrides: list[str]) -> None:
    """The project's command ``name`` (its ``main``) with ``overrides``, each (owner, attribute, phase)
    of ``timed`` recorded as that phase, and the torch peak at the end."""
    events.write(phase="imports", start=STARTED, end=time.time(), cpu=own_cpu())
    for owner, attr, phase in timed:
        events.timed(owner, attr, phase)
    sys.argv = [name, *overrides]
    try:
        command.main()
    finally:
        _peak(events, sys.modules["torch"])
        if "torch._dynamo" in sys.modules and (facts := compile_facts())["frames_compiled"]:
            events.write(phase="compile", **facts)


def command_line(contender: str, events: Path, args: list[str]) -> list[str]:
    """The command that runs ``contender`` with ``args``, its phase records to ``events`` (emptied)."""
    events.unlink(missing_ok=True)
    return [sys.executable, "-m", "bench.gpu_child", contender, "--events", str(events), *args]


def artifact_texts(artifact: Path) -> list[str]:
    """The texts as the artifact stores them (the same characters every contender reads)."""
    import pyarrow.parquet as pq

    return [
        str(t) for t in pq.read_table(artifact / "documents.parquet", columns=["text"])["text"].to_pylist()
    ]


def load_plain(model: Path, device: str, dtype: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    lm = AutoModelForCausalLM.from_pretrained(model, dtype=getattr(torch, dtype), device_map=device)
    return tokenizer, lm.eval()


def official(events: Events, args: argparse.Namespace) -> None:
    """``find_key_token(text, model, tokenizer, K, d)`` of longppl 0.3.0 on each text, with the
    artifact's K and d."""
    import torch
    from longppl.longppl import find_key_token

    events.write(phase="imports", start=STARTED, end=time.time(), cpu=own_cpu())
    with events.phase("model load"):
        tokenizer, model = load_plain(args.model, args.device, args.dtype)
    settings = json.loads((args.artifact / "manifest.json").read_text())["settings"]
    for text in artifact_texts(args.artifact):
        with events.phase("text"):
            find_key_token(text, model, tokenizer, settings["K"], settings["d"])
    _peak(events, torch)


def plain(events: Events, args: argparse.Namespace) -> None:
    """One forward of each whole text (no BOS, as ``add_bos=false``), full logits, then a float32
    cross-entropy over its next tokens."""
    import torch

    events.write(phase="imports", start=STARTED, end=time.time(), cpu=own_cpu())
    with events.phase("model load"):
        tokenizer, model = load_plain(args.model, args.device, args.dtype)
    for text in artifact_texts(args.artifact):
        with events.phase("text"):
            ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"].to(model.device)
            with torch.inference_mode():
                logits = model(ids).logits[0, :-1]
                nll = torch.nn.functional.cross_entropy(logits.float(), ids[0, 1:])
            float(nll)
            del logits
    _peak(events, torch)


def _peak(events: Events, torch) -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        events.write(phase="torch peak", bytes=torch.cuda.max_memory_allocated())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("contender", choices=["stage1", "stage2", "official", "plain"])
    parser.add_argument("--events", type=Path, required=True)
    parser.add_argument("--tf32", action="store_true", help="allow TF32 in float32 matrix products")
    parser.add_argument(
        "--until-first-text", action="store_true", help="stop as the first text's computation starts"
    )
    parser.add_argument("--model", type=Path)
    parser.add_argument("--artifact", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument(
        "--sdpa-math", action="store_true", help="sdpa on its math backend only (float32 as before 88746e2)"
    )
    args, overrides = parser.parse_known_args(argv)
    if args.tf32:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    events = Events(args.events, stop_at="text" if args.until_first_text else None)
    with _math_only() if args.sdpa_math else contextlib.nullcontext():
        if args.contender == "stage1":
            stage1(events, overrides)
        elif args.contender == "stage2":
            stage2(events, overrides)
        else:
            {"official": official, "plain": plain}[args.contender](events, args)


def _math_only():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.MATH])


if __name__ == "__main__":
    main()
