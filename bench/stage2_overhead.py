"""Stage 2 against a plain-PPL pass, side by side in one run, on the same documents and model.

The plain pass tokenizes each artifact text and runs the same forward path (one pass, chunked
output head) to get PPL alone. Stage 2 does that plus the alignment of key spans and soft
weights and the alpha/beta grid. Both are timed alternately per document, repeated, and the
ratio of total times is reported.

    make bench-stage2
    .venv/bin/python -m bench.stage2_overhead --model smollm2-135m --documents 4 --repeats 2
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from bench.harness import arguments, default_artifact, stamp
from pipeline.artifact.reader import iter_documents, load_artifact
from pipeline.models.loading import load_model
from pipeline.models.logprobs import TargetScorer, full_context_logprobs
from pipeline.score.documents import score_document
from pipeline.settings import ScoreSettings
from pipeline.text.tokenization import encode_with_offsets


def plain_ppl(lm, scorer, text: str) -> tuple[float, float]:
    """(sum of NLL, tokens) of one text: tokenization and one forward pass, nothing else."""
    enc = encode_with_offsets(lm.tokenizer, text)
    seq = torch.tensor([lm.bos_token_id, *enc.ids.tolist()])
    logprobs = full_context_logprobs(scorer, seq)[1:]
    return float(-logprobs.sum()), float(len(logprobs))


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--artifact", default=str(default_artifact()))
    parser.add_argument("--documents", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    artifact = load_artifact(args.artifact)
    docs = list(iter_documents(artifact))[: args.documents]
    lm = load_model(args.model, dtype="float32", device="cpu")
    scorer = TargetScorer(lm.model)
    settings = ScoreSettings()
    plain_s = stage2_s = 0.0
    for _ in range(args.repeats):
        for doc in docs:
            t = time.perf_counter()
            nll, n = plain_ppl(lm, scorer, doc.text)
            plain_s += time.perf_counter() - t
            t = time.perf_counter()
            scored = score_document(lm, scorer, doc, settings)
            stage2_s += time.perf_counter() - t
            assert np.isclose(scored.all.nll, nll) and scored.all.n == n, (
                "both paths must compute the same PPL"
            )
    print(f"| path | seconds ({args.repeats} x {len(docs)} documents) | ratio |")
    print("|---|---:|---:|")
    print(f"| plain PPL (tokenize + forward) | {plain_s:.1f} | 1.000 |")
    print(
        f"| stage 2 (PPL, LongPPL, LongPPL-soft, 4-point grid) | {stage2_s:.1f} | {stage2_s / plain_s:.3f} |"
    )
    print(
        f"\nmodel {args.model}, artifact {Path(args.artifact).name}, torch threads {torch.get_num_threads()}; {stamp()}"
    )


if __name__ == "__main__":
    main()
