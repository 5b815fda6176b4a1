"""Both stages at 32k, 64k and 128k tokens (issue 33): peak memory grows linearly with the text.

One child process per length (a clean heap, killed past 4 GB) loads the tiny random model of
bench/long_memory.py through ``load_model`` (one full causal attention layer, the path of every 128k
evaluator's long pass; vocabulary 4096, float32) and runs stage 1's log-probs (``long_and_short_logprobs``,
K=4096, d=1024) and stage 2's (``sequence_logprobs``, one pass) on documents of 32768, 65536 and 131071
tokens, each call's peak resident memory above its start sampled by ``bench.runner.clock``. About two
minutes on 2 cores (the attention's time is quadratic; its memory must not be).

How it fails on a quadratic implementation: attention that materialises its scores (eager attention,
or sdpa's math backend without blocked_sdpa's query blocks) holds 2 heads x n x n float32. Measured
on this model (``make bench-long-memory ARGS="--attn eager --tokens 4096 8192 16384"``): stage 1 323,
1510 and 5129 MiB above the start at 4k, 8k and 16k tokens, stage 2 331, 1293 and 5137 MiB, about
3.9 times per doubling (over GROWTH); 8 GiB of scores at 32k tokens would pass the child's cap, and at
131071 tokens one head's score matrix alone is 64 GiB. A scores
matrix in query blocks of fixed size grows linearly; float32 logits over the whole vocabulary at
every position (a pass without the output head's blocks) grow linearly too but are 2 GiB at 131071
tokens: four times the bound below.
"""

from __future__ import annotations

import itertools

import pytest

from bench import long_memory

TOKENS = long_memory.TOKENS
MIB = long_memory.MIB
# Doubling the text may multiply a peak by at most this: linear growth a + b n (a >= 0) at most
# doubles it, a quadratic term quadruples it (the sampler may miss one 32 MiB activation). Not a bound
# on the second difference (peak(128k) - peak(64k) against peak(64k) - peak(32k)): the output head's
# blocks (two of 2048 x 4096 float32 logits, 64 MiB) are most of the peak up to 64k tokens and do not
# grow, and the body's linear activations overtake them between 64k and 128k (docs/reports/memory.md).
GROWTH = 3.0
SLACK_MIB = 16  # sampling noise, on peaks of 75 to 250 MiB
BOUND = long_memory.full_logits_bytes(TOKENS[-1]) / 4  # 512 MiB at 131071 tokens


@pytest.fixture(scope="module")
def peaks() -> dict[str, dict[int, float]]:
    """Each stage's peak (MiB above the start of the call) per length, one child process each."""
    rows = {row["tokens"]: row for row in long_memory.measure(list(TOKENS), cap_gb=4.0)}
    assert not any("failed" in row for row in rows.values()), rows
    return {stage: {n: rows[n][f"{stage} MiB"] for n in TOKENS} for stage in long_memory.STAGES}


@pytest.mark.parametrize("stage", list(long_memory.STAGES))
def test_peak_memory_grows_linearly_to_128k_tokens(peaks, stage):
    peak = peaks[stage]
    shown = {n: f"{p:.0f} MiB" for n, p in peak.items()}
    for shorter, longer in itertools.pairwise(TOKENS):
        assert peak[longer] <= GROWTH * peak[shorter] + SLACK_MIB, (stage, shown)
    assert peak[TOKENS[-1]] * MIB < BOUND, (stage, shown, f"bound {BOUND / MIB:.0f} MiB")
