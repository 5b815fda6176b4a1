"""Peak memory and time of both stages' log-probs on one document of 32k, 64k and 128k tokens.

The model is tiny and random (Llama's layout: one full causal attention layer, the path of every
128k evaluator's long pass, hidden 16, 2 query heads of 8 over 1 key/value head, vocabulary 4096,
float32, on the CPU), saved with a word-level tokenizer and loaded through ``load_model``: its
attention costs O(n^2) time (about 50 s per pass at 131071 tokens on 2 cores), its memory must not
grow faster than n. Stage 1 is
``long_and_short_logprobs`` (K=4096, d=1024, BOS before every window), stage 2 the score stage's
``sequence_logprobs`` (one pass, no context limit), both with the default compute settings. Each
length runs in its own process, one torch thread (``--threads``); peak: resident memory above the
start of each call (``bench.runner.clock``, sampled every millisecond), the model loaded and one
12-token check pass done. tests/bench/test_long_memory.py runs the same measurement and asserts linear growth.

    make bench-long-memory                                  # 32768, 65536, 131071 tokens
    make bench-long-memory ARGS="--tokens 32768 65536 --threads 1"
    make bench-long-memory ARGS="--attn eager --tokens 4096 8192 16384"   # quadratic: 3.9x per doubling

Writes its section of docs/reports/memory.md.
"""

from __future__ import annotations

import contextlib
import ctypes
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from bench import runner, shared
from bench.report import publish
from pipeline.models.attention import NAME as ATTENTION  # the pipeline's: blocked_sdpa

TOKENS = (32768, 65536, 131071)
VOCAB = 4096
K, D = 4096, 1024
MAX_POSITIONS = 131072
# The tests' tiny Llama, smaller still: one layer of hidden 16, 2 query heads of 8 over one key/value head.
SHAPE = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1}
SHAPE |= {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8}
MIB = 2**20
M_MMAP_THRESHOLD, MMAP_THRESHOLD = -3, 2**20  # glibc's mallopt parameter and its value here


def tiny_checkpoint(path: Path, vocab: int = VOCAB, seed: int = 0) -> Path:
    """Save the tiny random model and a word-level tokenizer (``<bos>``, ``<eos>``, ``t2`` ...) to
    ``path``: a checkpoint that ``load_model`` reads like any local model."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from studies.random_models import random_model, tiny_config

    config = tiny_config("llama", vocab, MAX_POSITIONS, **SHAPE)
    random_model(config, seed=seed).save_pretrained(path)
    words = {"<bos>": 0, "<eos>": 1, **{f"t{i}": i for i in range(2, vocab)}}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="<eos>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<bos>", eos_token="<eos>").save_pretrained(
        path
    )
    return path


def load(path: Path, attn: str = ATTENTION) -> tuple[Any, Any]:
    """(LoadedModel, TargetScorer) of a checkpoint in float32 on the CPU, as ``make score`` loads and
    scores it (``attn``: another attention implementation, e.g. eager, to see a quadratic one); the
    scorer's check pass done, so that every weight is touched before a measurement."""
    from pipeline.models.loading import load_model
    from pipeline.models.logprobs import scorer_for
    from pipeline.settings import Compute

    lm = load_model(str(path), dtype="float32", device="cpu", attn_implementation=attn)
    scorer = scorer_for(lm, Compute(dtype="float32", device="cpu"))
    scorer.check_against_full_forward()
    return lm, scorer


def token_sequence(n: int, bos: int, vocab: int = VOCAB, seed: int = 0) -> Any:
    """``n`` token ids: BOS, then random ids of the vocabulary's words."""
    import torch

    words = torch.randint(2, vocab, (n - 1,), generator=torch.Generator().manual_seed(seed))
    return torch.cat([torch.tensor([bos]), words])


def stage1(lm: Any, scorer: Any, seq: Any) -> Any:
    """Stage 1's log-probs of one document: the long pass and the short windows."""
    from pipeline.models.logprobs import long_and_short_logprobs

    return long_and_short_logprobs(scorer, seq, K, D, bos_id=lm.bos_token_id)


def stage2(lm: Any, scorer: Any, seq: Any) -> Any:
    """Stage 2's log-probs of one document, as ``make score`` takes them (no context limit)."""
    import numpy as np

    from pipeline.score.documents import ModelSequence, sequence_logprobs

    n = len(seq) - 1
    sequence = ModelSequence("", n, seq, np.zeros((n, 2), dtype=np.int64), lm.bos_token_id, False)
    return sequence_logprobs(lm, scorer, sequence, None, "long")


STAGES: dict[str, Callable[[Any, Any, Any], Any]] = {"stage 1": stage1, "stage 2": stage2}


def mmap_large_allocations(threshold: int = MMAP_THRESHOLD) -> None:
    """Every allocation of ``threshold`` bytes or more its own mapping, unmapped when freed (glibc's
    ``mallopt``): resident memory then follows the live tensors, not the heap's high-water mark
    (without it, stage 1 once peaked at 513 MiB above its start at 64k tokens, 268 MiB at 128k)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, threshold)


@cache
def loaded(threads: int, attn: str) -> tuple[Any, Any]:
    """The tiny checkpoint, saved and loaded once per process (``threads`` torch threads)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    mmap_large_allocations()
    with tempfile.TemporaryDirectory() as folder:
        return load(tiny_checkpoint(Path(folder)), attn)


def setup(stage: str, tokens: int, threads: int = 0, attn: str = ATTENTION) -> runner.Work:
    """One stage's log-probs of a ``tokens``-token document on the tiny model."""
    lm, scorer = loaded(threads, attn)
    seq = token_sequence(tokens, lm.bos_token_id)
    return lambda: STAGES[stage](lm, scorer, seq)


CASE = runner.Case(
    "long_memory", contenders=tuple(STAGES), sizes=TOKENS, setup=setup, together=True, interval=0.001
)


def full_logits_bytes(n: int, vocab: int = VOCAB) -> int:
    """What a pass would hold with float32 logits over the whole vocabulary at every position."""
    return n * vocab * 4


def measure(tokens: list[int], threads: int = 0, cap_gb: float = 12.0, attn: str = ATTENTION) -> list[dict]:
    """Both stages at each length, one process per length: per length, each stage's seconds and peak
    MiB above its start and the process's peak MiB, or why it failed (an error, past ``cap_gb``)."""
    options = {"threads": threads, "attn": attn}
    found = runner.run(CASE, sizes=tokens, options=options, cap_gb=cap_gb, timeout=3600)
    rows = []
    for n in tokens:
        stages = [r for r in found if r["size"] == n]
        row = {"tokens": n, "process_mib": stages[0]["process"]["peak_bytes"] / MIB}
        if failed := next((r["failed"] for r in stages if "failed" in r), None):
            rows.append(row | {"failed": failed})
            continue
        for r in stages:
            row |= {
                f"{r['contender']} s": r["work"]["seconds"],
                f"{r['contender']} MiB": r["work"]["above_start_bytes"] / MIB,
            }
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    """The measurements as a Markdown table."""
    lines = [
        "| tokens | stage 1 (s) | stage 1 peak above baseline (MiB) | stage 2 (s) "
        "| stage 2 peak above baseline (MiB) | process peak (MiB) | full logits (MiB) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['tokens']} | failed: {r['failed']} | | | | | |")
            continue
        lines.append(
            f"| {r['tokens']} | {r['stage 1 s']:.1f} | {r['stage 1 MiB']:.0f} | {r['stage 2 s']:.1f} "
            f"| {r['stage 2 MiB']:.0f} | {r['process_mib']:.0f} "
            f"| {full_logits_bytes(r['tokens']) / MIB:.0f} |"
        )
    return "\n".join(lines)


def thread_count(threads: int) -> str:
    """``--threads`` in words."""
    return (
        "torch's default number of threads"
        if not threads
        else f"{threads} torch thread" + "s" * (threads > 1)
    )


def document(rows: list[dict], machine: str, threads: int) -> str:
    """Its section of docs/reports/memory.md: what was measured, where, how to rerun it, the table."""
    return (
        "# Both stages at 128k tokens: peak memory against the text's length\n\n"
        "What this page is for: the peak memory and time of stage 1's log-probs (the long pass and the "
        "short windows, K=4096, d=1024) and of stage 2's (`make score`'s one pass) on one document of "
        "32k, 64k and 128k tokens: both grow linearly with the text (tests/bench/test_long_memory.py asserts "
        "it on the same measurement).\n\n"
        "Regenerate: `make bench-long-memory` (bench/long_memory.py). A tiny random model loaded through "
        "`load_model` (Llama's layout: one full causal attention layer, as every 128k evaluator's long "
        f"pass, hidden 16, 2 query heads of 8 over 1 key/value head, vocabulary {VOCAB}, float32), the default compute "
        f"settings, one process per length, {thread_count(threads)}. "
        "Peak: resident memory above the start of each stage (the model loaded, one 12-token check "
        "pass done), sampled every millisecond, with every allocation of 1 MiB or more mapped on its own "
        "(glibc `mallopt`), so that it follows the live tensors. Process peak: the whole process, "
        "torch and the model included. Full logits: float32 logits over the whole vocabulary at every "
        "position, what one pass without the output head's blocks would hold; a sequence x sequence "
        "float32 score matrix would take 64 GiB per head at 131071 tokens. Up to 64k tokens most of "
        "the peak is the output head's blocks (2048 positions x 4096 logits, float32: 32 MiB each, "
        "two alive at once), which do not grow with the text.\n\n"
        f"Machine: {machine} (the children ran with {thread_count(threads)}). Times are from a machine shared with "
        "other jobs: compare them within the table only.\n\n" + table(rows) + "\n"
    )


def main() -> None:
    if runner.child(CASE):
        return
    parser = shared.arguments(__doc__)
    parser.add_argument("--tokens", type=shared.whole(1), nargs="+", default=list(TOKENS))
    parser.add_argument("--cap-gb", type=shared.above(0), default=12.0)
    parser.add_argument(
        "--output", type=shared.output_file, help="a page of its own (default: docs/reports/memory.md)"
    )
    parser.add_argument(
        "--threads", type=shared.whole(0), default=0, help="torch threads (0: torch's default)"
    )
    parser.add_argument(
        "--attn", default=ATTENTION, help="attention implementation (another: printed, the page kept)"
    )
    args = parser.parse_args()
    rows = measure(args.tokens, args.threads, args.cap_gb, args.attn)
    if args.attn == ATTENTION:
        publish(document(rows, runner.stamp(), args.threads), "memory.md", "long", args.output)
    print(table(rows))


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
