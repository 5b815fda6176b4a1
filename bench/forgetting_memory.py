"""Peak resident memory of one forgetting-curve point above the loaded model (issue #10, item 4).

One sample of length L: its copy and LM inputs (2L+3 tokens each), first the pipeline's way (the
model's body once, the output head only on the ceil(L/2) scored positions, top-1 over vocabulary
tiles: ``pipeline.forgetting.curve.measure_length``), then, side by side, the reference code's way (full
logits of the whole input, argmax). Each runs in its own process for a clean peak; a sampler thread
reads the process's resident set size every 10 ms (``bench.harness.PeakMemory``).
Baseline: RSS after loading the model, tokenizing the corpus and one 12-token check pass. Both ways
must give the same accuracies.

    make bench-forgetting                              # SmolLM2-135M, float32, L=4094: inputs of 8191 tokens
    .venv/bin/python -m bench.forgetting_memory --model gemma3-270m --length 4094
"""

from __future__ import annotations

import gc
import os
import time

from bench.harness import ROOT, PeakMemory, arguments, child, memory_record, rss, run, stamp

WAYS = ("pipeline", "full-logits")


def full_logits_accuracy(model, ids, length: int) -> float:
    """The reference's way: every position's logits over the whole vocabulary, then argmax."""
    import torch

    from pipeline.forgetting.samples import scored_positions

    with torch.inference_mode():
        predicted = model(input_ids=ids[None]).logits[0].argmax(-1)
    targets = torch.as_tensor(scored_positions(length))
    return float((predicted[targets - 1] == ids[targets]).double().mean())


def measure(way: str, model: str, dtype: str, length: int) -> dict:
    """One way, in its own process: one sample of length ``length``, its copy and LM accuracies."""
    from pipeline.forgetting import curve
    from pipeline.forgetting.samples import build_input, corpus_tokens, draw_samples, special_tokens
    from pipeline.models.loading import load_model
    from pipeline.models.logprobs import TargetScorer
    from pipeline.text.corpus import CorpusSpec, load_corpus

    lm = load_model(model, dtype=dtype, device="cpu")
    docs = load_corpus(CorpusSpec(name="govreport_sample", path=str(ROOT / "data/govreport-sample.jsonl")))
    tokens = corpus_tokens(docs, lm.tokenizer)
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
    gc.collect()
    baseline = rss()
    start = time.perf_counter()
    with PeakMemory() as peak:
        if way == "pipeline":
            point = curve.measure_length(scorer, settings, [sample], lambda _: None)
            copy, lm_acc = point["copy_accs"][0], point["lm_accs"][0]
        else:
            copy, lm_acc = (
                full_logits_accuracy(lm.model, build_input(prefix, sample.target, bos, eos), length)
                for prefix in (sample.target, sample.irrelevant)
            )
    return {
        "way": way,
        "model": model,
        "dtype": dtype,
        "length": length,
        "input_tokens": len(build_input(sample.target, sample.target, bos, eos)),
        "copy_acc": copy,
        "lm_acc": lm_acc,
        **memory_record(baseline, peak, start),
    }


def main() -> None:
    if child(measure):
        return
    parser = arguments(__doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--length", type=int, default=4094, help="L, tokens of S (inputs have 2L+3 tokens)")
    parser.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS))
    args = parser.parse_args()
    fixed = {"model": args.model, "dtype": args.dtype, "length": args.length}
    rows = run("bench.forgetting_memory", [{"way": way, **fixed} for way in args.ways])
    print(
        "| way | L | input tokens | copy acc | LM acc | baseline (model loaded) GB | peak GB | above model GB | seconds |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['way']} | {r['length']} | {r['input_tokens']} | {r['copy_acc']:.4f} | {r['lm_acc']:.4f} "
            f"| {r['baseline_gb']:.2f} | {r['peak_gb']:.2f} | {r['above_model_gb']:.2f} | {r['seconds']:.0f} |"
        )
    same = len({(r["copy_acc"], r["lm_acc"]) for r in rows}) == 1
    print(
        f"\nmodel {args.model}, {args.dtype}, CPU threads {os.cpu_count()}; accuracies identical: {same}; {stamp()}"
    )


if __name__ == "__main__":
    main()
