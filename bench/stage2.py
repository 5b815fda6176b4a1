"""Stage 2 against a plain-PPL pass, side by side in one run, on the same documents and model.

The plain pass tokenizes each artifact text and runs the same forward path (one pass, chunked
output head) to get PPL alone. Stage 2 is the score engine's call (``pipeline.score.engine.score``,
what `make score` runs): that plus the alignment of key spans and soft weights and the alpha/beta
grid. Each runs in its own process over the same documents, ``--repeats`` times; the ratio of the
median times is reported, and both must give every document the same PPL.

    make bench-stage2
    make bench-stage2 ARGS="--model smollm2-135m --documents 4 --repeats 2"
"""

from __future__ import annotations

import math

import numpy as np

from bench import runner, shared


def stage2(artifact, lm, documents: int) -> dict:
    """The score engine's call on the first ``documents`` documents: each one's PPL and tokens."""
    from pipeline.score.engine import score
    from pipeline.settings import Compute, ScoreSettings

    result = score(artifact, lm, ScoreSettings(), Compute(dtype="float32", device="cpu"), documents=documents)
    return {"ppl": [d["ppl"] for d in result.documents], "n": [d["n_scored"] for d in result.documents]}


def plain(artifact, lm, documents: int) -> dict:
    """Tokenization and one forward pass per text, nothing else: each text's PPL and tokens."""
    import torch

    from pipeline.artifact.reader import iter_documents
    from pipeline.models.logprobs import TargetScorer, full_context_logprobs
    from pipeline.text.tokenization import encode_with_offsets

    scorer, out = TargetScorer(lm.model), {"ppl": [], "n": []}
    for doc in list(iter_documents(artifact))[:documents]:
        ids = encode_with_offsets(lm.tokenizer, doc.text).ids.tolist()
        logprobs = full_context_logprobs(scorer, torch.tensor([lm.bos_token_id, *ids]))[1:]
        out["ppl"].append(math.exp(float(-logprobs.sum()) / len(logprobs)))
        out["n"].append(len(logprobs))
    return out


def setup(contender: str, documents: int, model: str, artifact: str) -> runner.Work:
    from pipeline.artifact.reader import load_artifact
    from pipeline.models.loading import load_model
    from pipeline.models.logprobs import TargetScorer

    loaded, lm = load_artifact(artifact), load_model(model, dtype="float32", device="cpu")
    TargetScorer(lm.model).check_against_full_forward()  # a warm-up: every weight paged in
    path = {"plain PPL": plain, "stage 2": stage2}[contender]
    return lambda: path(loaded, lm, documents)


CASE = runner.Case("stage2", contenders=("plain PPL", "stage 2"), sizes=(4,), setup=setup)


def main() -> None:
    if runner.child(CASE):
        return
    parser = shared.arguments(__doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--artifact", default=str(shared.default_artifact()))
    parser.add_argument("--documents", type=shared.whole(1), default=CASE.sizes[0])
    parser.add_argument("--repeats", type=shared.whole(1), default=2)
    args = parser.parse_args()
    options = {"model": args.model, "artifact": args.artifact}
    plain_run, stage2_run = runner.run(
        CASE, sizes=[args.documents], options=options, repeats=args.repeats, strict=True
    )
    if plain_run["n"] != stage2_run["n"] or not np.allclose(plain_run["ppl"], stage2_run["ppl"], rtol=1e-5):
        raise SystemExit(f"both paths must compute the same PPL: {plain_run['ppl']} and {stage2_run['ppl']}")
    plain_s, stage2_s = plain_run["work"]["seconds"], stage2_run["work"]["seconds"]
    print(f"| path | seconds ({args.documents} documents, median of {args.repeats}) | ratio |")
    print("|---|---:|---:|")
    print(f"| plain PPL (tokenize + forward) | {plain_s:.1f} | 1.000 |")
    print(
        f"| stage 2 (PPL, LongPPL, LongPPL-soft, 4-point grid) | {stage2_s:.1f} | {stage2_s / plain_s:.3f} |"
    )
    print(f"\nmodel {args.model}, artifact {shared.relative(args.artifact)}; {runner.stamp()}")


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
