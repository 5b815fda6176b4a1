"""`make bench-gpu-levers`: where stage 1's time per text goes on a GPU, and what each lever does to it.

One process loads the evaluator of ``make bench-gpu`` (Llama-3.1-8B's shape, random bfloat16 weights,
the float32 head of ``preset=paper``) and runs stage 1's two passes (``long_and_short_logprobs``, K=4096,
d=1024) on the first text of the artifact that ``make bench-gpu`` wrote, after one warm-up run. Each
lever is a contender of this case, all in that one process, in turn:

- the split: the long pass's body and head, the short windows' body and head;
- the last layer's cost on the short windows (the body without it): what skipping it for the K
  context-only positions of each window could save at most (their share, K / (K + d), of it);
- short windows batched to 5120 (one window), 16384 (the default), 32768 and 65536 tokens;
- sdpa's kernels forced one at a time (flash, cuDNN, memory-efficient);
- the long pass alone (what stage 2 runs per text) with the head in larger blocks;
- the load: the checkpoint's safetensors files straight onto the GPU against the pipeline's load;
- each RMSNorm as torch's fused kernel (``torch.nn.functional.rms_norm``), which transformers' Llama
  does not call (rotary and SwiGLU have no fused kernel in torch itself: ``torch.compile`` fuses them);
- with ``--compile``, the decoder layers under ``torch.compile`` as ``compile=on`` compiles them (its
  compile time, then a run), last: every lever after it would run compiled.

Every lever keeps the numbers (the same passes; another kernel is another order of float sums): the
run reports the largest |difference| of its long and short log-probs from the warm-up run's (computed
inside the lever's timed work: a max over one text's values). ``--budget`` bounds the whole process;
what was measured before it is cut is kept.

    python -m bench.gpu_levers --tokens 32767 --json levers.json
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bench import runner, shared
from bench.gpu_child import WORK, paths
from pipeline.errors import ArgumentParser

K, D = 4096, 1024  # the paper's; --K and --d for a dry run on short texts
LOAD_DIRECT, LOAD_OURS, FIRST = (
    "load: safetensors straight onto the device",
    "load: the pipeline's",
    "first run",
)


def first_text_ids(artifact: Path) -> list[int]:
    import pyarrow.parquet as pq

    tokens = pq.read_table(artifact / "tokens.parquet", columns=["doc_id", "token_id"]).to_pydict()
    first = tokens["doc_id"][0]
    return [t for d, t in zip(tokens["doc_id"], tokens["token_id"], strict=True) if d == first]


def load_direct(model: Path, device: str) -> dict:
    """Every safetensors file of ``model`` read onto ``device`` (freed on return)."""
    from safetensors.torch import load_file

    return {
        "parameters": sum(
            t.numel() for f in sorted(model.glob("*.safetensors")) for t in load_file(f, device).values()
        )
    }


def with_values(obj: Any, values: dict[str, Any], fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` run with ``obj``'s attributes set to ``values``, set back after."""

    def run() -> Any:
        before = {k: getattr(obj, k) for k in values}
        for k, v in values.items():
            setattr(obj, k, v)
        try:
            return fn()
        finally:
            for k, v in before.items():
                setattr(obj, k, v)

    return run


class Shared:
    """What the levers share in their one process: the evaluator (loaded by the lever ``LOAD_OURS``),
    its scorer, the text, and the first run's values that every lever's are compared with."""

    lm: Any = None

    def ready(self, artifact: Path, device: str, K: int, d: int) -> Shared:
        """The scorer and the first text of ``artifact``, once the evaluator is loaded."""
        import torch

        from pipeline.models.logprobs import scorer_for
        from pipeline.settings import Compute

        if not hasattr(self, "scorer"):
            self.scorer = scorer_for(self.lm, Compute(dtype="bfloat16", device=device, head_dtype="float32"))
            bos = [] if self.lm.bos_token_id is None else [self.lm.bos_token_id]
            self.seq = torch.tensor([*bos, *first_text_ids(artifact)], dtype=torch.long)
            self.K, self.d, self.text_tokens = K, d, len(self.seq) - len(bos)
        return self

    def stage1(self) -> Any:
        from pipeline.models.logprobs import long_and_short_logprobs

        return long_and_short_logprobs(self.scorer, self.seq, self.K, self.d)

    def first(self) -> dict:
        self.reference = self.stage1()
        return {"text_tokens": self.text_tokens}

    def compared(self, run: Callable[[], Any] | None = None, **facts: Any) -> runner.Work:
        """A lever's work: ``run`` (stage 1 by default), then its largest difference from the first run."""

        def work() -> dict:
            out, ref = (run or self.stage1)(), self.reference
            if hasattr(out, "short"):
                diff = [np.nanmax(np.abs(out.long - ref.long)), np.nanmax(np.abs(out.short - ref.short))]
                facts["max_abs_diff"] = float(max(diff))
            elif isinstance(out, np.ndarray):  # the long pass alone
                facts["max_abs_diff"] = float(np.nanmax(np.abs(out - ref.long)))
            return facts

        return work

    def batches(self) -> list:
        import torch

        from pipeline.models.logprobs import _batches, short_windows, window_ids

        groups = _batches(
            short_windows(len(self.seq), self.K, self.d), self.scorer.window_batch_tokens, self.K + self.d
        )
        return [torch.stack([window_ids(self.seq, w, []) for w in g]) for g in groups]

    def long_body(self) -> runner.Work:
        return lambda: self.scorer.hidden_states(self.seq[None])

    def long_head(self) -> runner.Work:
        """The head on the long pass's hidden states (computed first, untimed)."""
        hidden, seq = self.scorer.hidden_states(self.seq[None])[0], self.seq
        return lambda: self.scorer.score_hidden(hidden[: len(seq) - 1], seq[1:])

    def short_body(self, less_last_layer: bool = False) -> runner.Work:
        """The short windows' body (without its last layer: what skipping it could save at most)."""
        import torch

        batches, body = self.batches(), self.scorer.body
        run = lambda: [self.scorer.hidden_states(b) for b in batches]  # noqa: E731
        if not less_last_layer:
            return run
        return with_values(body, {"layers": torch.nn.ModuleList(list(body.layers)[:-1])}, run)

    def short_head(self) -> runner.Work:
        """The head on the short windows' scored positions (their hidden states computed first, untimed)."""
        scorer, K = self.scorer, self.K
        rows = [(scorer.hidden_states(b)[:, K - 1 : -1].reshape(-1, scorer.head.weight.shape[1]),
                 b[:, K:].reshape(-1)) for b in self.batches()]  # fmt: skip
        return lambda: [scorer.score_hidden(h, t) for h, t in rows]

    def levers(self, quick: bool, compile: bool) -> dict[str, Callable[[], runner.Work]]:
        """Every lever after the first run, in order: its name and its setup."""
        out = {
            "default (window_batch_tokens=16384)": self.compared,
            "long pass: body": self.long_body,
            "long pass: head": self.long_head,
            "short windows: body": self.short_body,
            "short windows: head": self.short_head,
            "short windows: body less its last layer": partial(self.short_body, less_last_layer=True),
        }
        blocks = [(8192, 65536)] if quick else [(4096, None), (8192, None), (8192, 65536), (16384, 32768)]
        for chunk, tile in [(2048, 16384), *blocks]:  # the defaults (Compute) first
            out[f"long pass, head_chunk={chunk} vocab_tile={tile}"] = partial(self.head_block, chunk, tile)
        for n in (32768,) if quick else (5120, 32768, 65536):
            out[f"window_batch_tokens={n}"] = partial(self.window_batch, n)
        for backend in (
            ("CUDNN_ATTENTION",) if quick else ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION")
        ):
            out[f"sdpa kernel {backend.lower()}"] = partial(self.kernel, backend)
        out["fused RMSNorm (torch.nn.functional.rms_norm)"] = self.fused_norm
        if compile:
            out["torch.compile of the decoder layers: first run (compiles)"] = self.compiled
            out["torch.compile of the decoder layers: next run"] = self.compared
        return out

    def head_block(self, chunk: int, tile: int | None) -> runner.Work:
        """The long pass alone with the head in blocks of ``chunk`` positions x ``tile`` entries."""
        from pipeline.models.logprobs import full_context_logprobs

        values = {"head_chunk": chunk, "vocab_tile": tile}
        run = with_values(self.scorer, values, lambda: full_context_logprobs(self.scorer, self.seq))
        return self.compared(run, **values)

    def window_batch(self, tokens: int) -> runner.Work:
        run = with_values(self.scorer, {"window_batch_tokens": tokens}, self.stage1)
        return self.compared(run, window_batch_tokens=tokens)

    def kernel(self, backend: str) -> runner.Work:
        """Stage 1 with sdpa on one kernel (a kernel that refuses these shapes fails: a result too)."""
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def run() -> Any:
            with sdpa_kernel([getattr(SDPBackend, backend)]):
                return self.stage1()

        return self.compared(run)

    def fused_norm(self) -> runner.Work:
        """Stage 1 with each RMSNorm of the body (Llama's: float32 statistics, the weight applied in the
        model's dtype) computed by torch's fused ``rms_norm`` on the same float32 values."""
        import torch

        norms = [m for m in self.scorer.body.modules() if hasattr(m, "variance_epsilon")]

        def fused(norm: Any) -> Callable[[Any], Any]:
            def forward(x: Any) -> Any:
                y = torch.nn.functional.rms_norm(x.float(), (x.shape[-1],), eps=norm.variance_epsilon)
                return norm.weight * y.to(x.dtype)

            return forward

        def run() -> Any:
            for norm in norms:
                norm.forward = fused(norm)
            try:
                return self.stage1()
            finally:
                for norm in norms:
                    del norm.forward

        return self.compared(run, norms=len(norms))

    def compiled(self) -> runner.Work:
        """The decoder layers compiled as ``compile=on`` compiles them (``pipeline.models.compilation``;
        the kernels in the work folder unless ``TORCHINDUCTOR_CACHE_DIR`` says), then stage 1."""
        from pipeline.models import compilation

        compilation.compile_layers(self.scorer.model, WORK)
        return self.compared()


SHARED = Shared()


def setup(lever: str, tokens: int, work: str, texts: int, device: str, K: int, d: int, quick: bool = False,
          compile: bool = False) -> runner.Work:  # fmt: skip
    """One lever in the process every lever shares: the two loads, the first run, then each lever."""
    import torch

    from pipeline.models.loading import load_model

    p = paths(Path(work), tokens)
    if lever == LOAD_DIRECT:
        return lambda: load_direct(p["model"], device)
    if lever == LOAD_OURS:
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
        return lambda: setattr(SHARED, "lm", load_model(str(p["model"]), dtype="bfloat16", device=device))
    ready = SHARED.ready(p["keytokens"] / f"paper{tokens}x{texts}", device, K, d)
    return ready.first if lever == FIRST else ready.levers(quick, compile)[lever]()


def names(quick: bool, compile: bool) -> list[str]:
    return [LOAD_DIRECT, LOAD_OURS, FIRST, *Shared().levers(quick, compile)]


CASE = runner.Case(
    "gpu_levers", contenders=tuple(names(False, True)), sizes=(32767,), setup=setup, together=True
)


def main() -> None:
    if runner.child(CASE):
        return
    parser = ArgumentParser(prog=shared.program(), description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--tokens", type=shared.whole(2), default=32767)
    parser.add_argument(
        "--texts", type=shared.whole(1), default=2, help="the bench-gpu run whose artifact is read"
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--compile", action="store_true", help="the layers under torch.compile, last")
    parser.add_argument("--quick", action="store_true", help="one window batch, cuDNN alone, one head block")
    parser.add_argument("--K", type=shared.whole(1), default=K)
    parser.add_argument("--d", type=shared.whole(1), default=D)
    parser.add_argument(
        "--budget", type=float, help="seconds for the whole process (what was measured is kept)"
    )
    parser.add_argument("--json", type=Path, default=WORK / "levers.json")
    args = parser.parse_args()
    options = {"work": str(args.work), "texts": args.texts, "device": args.device, "K": args.K, "d": args.d,
               "quick": args.quick, "compile": args.compile}  # fmt: skip
    rows = runner.run(CASE, contenders=names(args.quick, bool(args.compile)), sizes=[args.tokens], options=options,
                      timeout=args.budget)  # fmt: skip
    by_name = {r["contender"]: r for r in rows}
    seconds = {name: round(by_name[name]["work"]["seconds"], 3) for name in (LOAD_DIRECT, LOAD_OURS, FIRST)
               if "work" in by_name[name]}  # fmt: skip
    record = {"bench": "gpu_levers", "tokens": args.tokens, "K": args.K, "d": args.d, "machine": runner.machine(),
              "load_direct_s": seconds.get(LOAD_DIRECT), "load_ours_s": seconds.get(LOAD_OURS),
              "text_tokens": by_name[FIRST].get("text_tokens"), "first_run_s": seconds.get(FIRST),
              "levers": [lever_row(r) for r in rows[3:]]}  # fmt: skip
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=1))
    print(f"written: {args.json}")


def lever_row(row: dict) -> dict:
    """A lever's record as the report reads it: its seconds and facts, or its error."""
    facts = {k: v for k, v in row.items() if k not in ("contender", "size", "work", "process", "failed")}
    if "failed" in row:
        return {"lever": row["contender"], "error": row["failed"], **facts}
    return {"lever": row["contender"], "seconds": round(row["work"]["seconds"], 4), **facts}


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()


def section(result: dict) -> list[str]:
    """The report's section: each lever's time against the default run's, and its largest difference."""
    m = result["machine"]
    rows = result["levers"]
    default = next((r["seconds"] for r in rows if r["lever"].startswith("default") and "seconds" in r), None)
    lines = [
        f"## Stage 1's levers, {result['tokens']:,} tokens (one text, one process)",
        "",
        f"{m.get('gpu', 'no GPU')}, torch {m['torch']}, transformers {m['transformers']}, commit {m.get('commit')}, "
        f"{m['date']}. `python -m bench.gpu_levers` (run by `bash bench/gpu_machine.sh 1`).",
        "",
        f"- load: the checkpoint's safetensors straight onto the GPU {result['load_direct_s']:.1f} s; the "
        f"pipeline's load {result['load_ours_s']:.1f} s (weights hashed beside it)",
        f"- the first run (warm-up) {result['first_run_s']:.2f} s; {result['text_tokens']:,} tokens",
        "",
        "| lever | seconds | against the default run | largest |difference| of a log-prob |",
        "|---|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['lever']} | | | failed: {r['error'][:120]} |")
            continue
        whole = "max_abs_diff" in r and not r["lever"].startswith("long pass")  # both passes, as stage 1
        ratio = f"{r['seconds'] / default:.3f}x" if default and whole else ""
        diff = f"{r['max_abs_diff']:.1e}" if "max_abs_diff" in r else ""
        lines.append(f"| {r['lever']} | {r['seconds']:.3f} | {ratio} | {diff} |")
    return [*lines, ""]
