"""Peak resident memory of stage 1 above the loaded evaluator, per document length.

Each length runs in its own process (a clean peak), its resident set sampled every 10 ms. Reported:
RSS after loading the model and one 12-token pass (baseline), peak RSS during the long and short
passes of one document, and their difference.

    make bench-stage1                       # Gemma 3 270M, float32, 2k/4k/8k tokens, K=4096, d=1024
    make bench-stage1 ARGS="--tokens 8192 --K 1024 --d 1024"
"""

from __future__ import annotations

import json
import os

from bench import runner, shared
from pipeline.settings import DEFAULT_HEAD_CHUNK


def document_ids(tokenizer, n_tokens: int) -> list[int]:
    """The first n_tokens evaluator tokens of the shipped GovReport sample, documents concatenated."""
    path = shared.ROOT / "data/govreport-sample.jsonl"
    texts = [json.loads(line)["text"] for line in path.open(encoding="utf-8")]
    ids = tokenizer("\n\n".join(texts), add_special_tokens=False)["input_ids"]
    if len(ids) < n_tokens:
        raise SystemExit(f"the sample has only {len(ids)} tokens")
    return ids[:n_tokens]


def setup(contender: str, tokens: int, model: str, dtype: str, K: int, d: int, head_chunk: int,
          window_batch_tokens: int) -> runner.Work:  # fmt: skip
    """Stage 1's log-probs of one ``tokens``-token document, the evaluator loaded and every weight touched."""
    import torch

    from pipeline.models.loading import load_model
    from pipeline.models.logprobs import TargetScorer, long_and_short_logprobs

    lm = load_model(model, dtype=dtype, device="cpu")
    ids = document_ids(lm.tokenizer, tokens)
    seq = torch.tensor([lm.bos_token_id, *ids[: tokens - 1]])
    scorer = TargetScorer(lm.model, head_chunk=head_chunk, window_batch_tokens=window_batch_tokens)
    scorer.check_against_full_forward()  # touches every weight: the baseline is the loaded model
    return lambda: long_and_short_logprobs(scorer, seq, K, d, bos_id=lm.bos_token_id)


CASE = runner.Case("stage1", contenders=("stage 1",), sizes=(2048, 4096, 8192), setup=setup)


def main() -> None:
    if runner.child(CASE):
        return
    parser = shared.arguments(__doc__)
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tokens", type=shared.whole(2), nargs="+", default=list(CASE.sizes))
    parser.add_argument("--K", type=shared.whole(1), default=4096)
    parser.add_argument("--d", type=shared.whole(1), default=1024)
    parser.add_argument("--head-chunk", type=shared.whole(1), default=DEFAULT_HEAD_CHUNK)
    parser.add_argument("--window-batch-tokens", type=shared.whole(1), default=16384)
    args = parser.parse_args()
    options = {"model": args.model, "dtype": args.dtype, "K": args.K, "d": args.d}
    options |= {"head_chunk": args.head_chunk, "window_batch_tokens": args.window_batch_tokens}
    rows = runner.run(CASE, sizes=args.tokens, options=options, strict=True)
    print("| tokens | K | d | baseline (model loaded) GB | peak GB | above model GB | seconds |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        w = r["work"]
        print(f"| {r['size']} | {args.K} | {args.d} | {w['start_bytes'] / 1e9:.2f} | {w['peak_bytes'] / 1e9:.2f} "
              f"| {w['above_start_bytes'] / 1e9:.2f} | {w['seconds']:.0f} |")  # fmt: skip
    print(
        f"\nmodel {args.model}, {args.dtype}, head_chunk {args.head_chunk}, "
        f"window_batch_tokens {args.window_batch_tokens}, CPU threads {os.cpu_count()}; {runner.stamp()}"
    )


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
