"""Peak resident memory of one forgetting-curve point above the loaded model.

One sample of length L: its copy and LM inputs (2L+3 tokens each), first the pipeline's way (the
model's body once, the output head only on the ceil(L/2) scored positions, top-1 over vocabulary
tiles: ``pipeline.forgetting.curve.measure_length``), then, side by side, the reference code's way (full
logits of the whole input, argmax). Each runs in its own process for a clean peak; a sampler thread
reads the process's resident set size every 10 ms (``bench.runner.clock``).
Baseline: RSS after loading the model, tokenizing the corpus and one 12-token check pass. Both ways
must give the same accuracies.

    make bench-forgetting                              # SmolLM2-135M, float32, L=4094: inputs of 8191 tokens
    make bench-forgetting ARGS="--model gemma3-270m --length 4094"
"""

from __future__ import annotations

import os

from bench import runner, shared


def full_logits_accuracy(model, ids, length: int) -> float:
    """The reference's way: every position's logits over the whole vocabulary, then argmax."""
    import torch

    from pipeline.forgetting.samples import scored_positions

    with torch.inference_mode():
        predicted = model(input_ids=ids[None]).logits[0].argmax(-1)
    targets = torch.as_tensor(scored_positions(length))
    return float((predicted[targets - 1] == ids[targets]).double().mean())


def setup(way: str, length: int, model: str, dtype: str) -> runner.Work:
    """One sample of length ``length``, the model loaded and every weight touched: its copy and LM
    accuracies the pipeline's way or the reference's."""
    from pipeline.forgetting import curve
    from pipeline.forgetting.samples import build_input, corpus_tokens, draw_samples, special_tokens
    from pipeline.models.loading import load_model
    from pipeline.models.logprobs import TargetScorer
    from pipeline.text.corpus import CorpusSpec, load_corpus

    lm = load_model(model, dtype=dtype, device="cpu")
    path = str(shared.ROOT / "data/govreport-sample.jsonl")
    tokens = corpus_tokens(load_corpus(CorpusSpec(name="govreport_sample", path=path)), lm.tokenizer)
    (sample,) = draw_samples(tokens, length, 1, 0, "corpus")
    specials = special_tokens(lm.tokenizer, None, None)
    bos, eos = specials["bos_token_id"], specials["eos_token_id"]
    scorer = TargetScorer(lm.model)
    scorer.check_against_full_forward()  # touches every weight: the baseline is the loaded model
    settings = curve.CurveSettings(
        source="corpus", grid="linear", n=1, R=1, max_length=length, min_length=1, seed=0,
        context=lm.context_length, beyond_context=False, bos_token_id=bos, eos_token_id=eos,
        head_chunk=scorer.head_chunk, vocab_tile=scorer.vocab_tile,
    )  # fmt: skip
    facts = {"input_tokens": len(build_input(sample.target, sample.target, bos, eos))}

    def work() -> dict:
        if way == "pipeline":
            point = curve.measure_length(scorer, settings, [sample], lambda _: None)
            return {**facts, "copy_acc": point["copy_accs"][0], "lm_acc": point["lm_accs"][0]}
        copy, lm_acc = (
            full_logits_accuracy(lm.model, build_input(prefix, sample.target, bos, eos), length)
            for prefix in (sample.target, sample.irrelevant)
        )
        return {**facts, "copy_acc": copy, "lm_acc": lm_acc}

    return work


CASE = runner.Case("forgetting", contenders=("pipeline", "full-logits"), sizes=(4094,), setup=setup)


def main() -> None:
    if runner.child(CASE):
        return
    parser = shared.arguments(__doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument(
        "--length", type=shared.whole(1), default=4094, help="L, tokens of S (inputs have 2L+3 tokens)"
    )
    parser.add_argument("--ways", nargs="+", choices=CASE.contenders, default=list(CASE.contenders))
    args = parser.parse_args()
    options = {"model": args.model, "dtype": args.dtype}
    rows = runner.run(CASE, contenders=args.ways, sizes=[args.length], options=options, strict=True)
    print(
        "| way | L | input tokens | copy acc | LM acc | baseline (model loaded) GB | peak GB | above model GB | seconds |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        w = r["work"]
        print(
            f"| {r['contender']} | {r['size']} | {r['input_tokens']} | {r['copy_acc']:.4f} | {r['lm_acc']:.4f} "
            f"| {w['start_bytes'] / 1e9:.2f} | {w['peak_bytes'] / 1e9:.2f} | {w['above_start_bytes'] / 1e9:.2f} "
            f"| {w['seconds']:.0f} |"
        )
    same = len({(r["copy_acc"], r["lm_acc"]) for r in rows}) == 1
    print(
        f"\nmodel {args.model}, {args.dtype}, CPU threads {os.cpu_count()}; accuracies identical: {same}; "
        f"{runner.stamp()}"
    )


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
