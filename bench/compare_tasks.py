"""The tasks `make bench` measures, each in its own watched subprocess (``bench.compare_official``
runs ``python -m bench.compare_tasks '<job as JSON>'`` and reads the JSON result from its last line).

A job names its task (``stage1-ours``, ``stage1-official``, ``stage2-ours``, ``stage2-official``,
``stage2-plain``, ``dropin-ours``, ``dropin-official``), the text length in evaluator tokens, the
document (None: all concatenated), K, d, and optionally the attention implementation.
"""

from __future__ import annotations

import json
import math
import tempfile
import time

from bench.harness import ROOT, PeakMemory, child

EVALUATOR, MODEL = "gemma3-270m", "smollm2-135m"


def bench_text(tokenizer, n_tokens: int, doc: int | None) -> str:
    """A text of n_tokens - 1 evaluator tokens (n_tokens with BOS): one sample document, or all
    concatenated. (The official find_key_token fails when its last window holds a single token,
    iterating a 0-d tensor; sequences of a multiple of d tokens avoid that.)"""
    from pipeline.text.tokenization import encode_with_offsets

    rows = [
        json.loads(line)["text"] for line in (ROOT / "data/govreport-sample.jsonl").open(encoding="utf-8")
    ]
    text = rows[doc] if doc is not None else "\n\n".join(rows)
    enc = encode_with_offsets(tokenizer, text)
    if len(enc.ids) >= n_tokens:
        text = text[: int(enc.offsets[n_tokens - 1, 0])]
    return text


def worker(job: dict) -> dict:
    import numpy as np
    import torch

    from pipeline.models import attention
    from pipeline.models.loading import load_model

    torch.set_grad_enabled(False)
    official = job["task"].endswith("official") or job["task"].startswith("dropin")
    attn = job.get("attn") or ("sdpa" if official else attention.NAME)
    evaluator = load_model(EVALUATOR, dtype="float32", device="cpu", attn_implementation=attn)
    text = bench_text(evaluator.tokenizer, job["tokens"], job.get("doc"))
    out = {"chars": len(text)}
    if job["task"].startswith("stage1"):
        lm = evaluator
    elif job["task"].startswith("dropin"):  # both models, as the user holds them (default attention)
        lm = (evaluator, load_model(MODEL, dtype="float32", device="cpu", attn_implementation=attn))
        lm[1].model(input_ids=torch.tensor([[1, 2, 3]]))
        evaluator.model(input_ids=torch.tensor([[1, 2, 3]]))
    else:
        del evaluator
        lm = load_model(MODEL, dtype="float32", device="cpu", attn_implementation=attn)
    if not isinstance(lm, tuple):
        lm.model(input_ids=torch.tensor([[1, 2, 3]]))  # warm up: every weight paged in before timing
    start = time.perf_counter()
    with PeakMemory(interval=0.02) as sampler:
        out.update(TASKS[job["task"]](lm, text, job))
    out["seconds"] = time.perf_counter() - start
    out["peak_gb"] = sampler.peak / 1e9
    out["tokens_scored"] = int(np.asarray(out.get("tokens_scored", 0)))
    return out


def stage1_ours(lm, text, job):
    from pipeline.commands.shell import compose, plain
    from pipeline.jobs.keytokens import KeyTokenSettings
    from pipeline.keytokens.selection import Prepared
    from pipeline.keytokens.tables import keytoken_tables
    from pipeline.models.logprobs import scorer_for
    from pipeline.text.corpus import Document
    from pipeline.text.tokenization import encode_with_offsets

    # `make keytokens`'s own settings (its CPU preset), with this job's K, d and the official convention
    overrides = [f"K={job['K']}", f"d={job['d']}", "short_window_bos=false"]
    settings = KeyTokenSettings.from_config(plain(compose("keytokens", overrides)))
    enc = encode_with_offsets(lm.tokenizer, text)
    item = Prepared(0, Document("bench", text), text, enc.ids, enc.offsets, enc.offsets_from, False)
    scorer = scorer_for(lm, settings.compute)
    _, tokens, spans = keytoken_tables(scorer, item, settings.definition, lm.bos_token_id)
    return {
        "spans": list(zip(spans["char_start"].to_pylist(), spans["char_end"].to_pylist(), strict=True)),
        "lsd": [None if x is None else round(x, 7) for x in tokens["lsd"].to_pylist()],
        "long": [round(x, 7) for x in tokens["long_logprob"].to_pylist()],
        "offsets": list(zip(tokens["char_start"].to_pylist(), tokens["char_end"].to_pylist(), strict=True)),
        "tokens_scored": len(enc.ids),
    }


def stage1_official(lm, text, job):
    from longppl.longppl import find_key_token

    intervals = find_key_token(text, lm.model, lm.tokenizer, job["K"], job["d"], alpha=2, beta=-2)
    return {"spans": [tuple(map(int, row)) for row in intervals.tolist()], "tokens_scored": 0}


def stage2_ours(lm, text, job):
    from pipeline.models.logprobs import TargetScorer
    from pipeline.score.documents import score_document
    from pipeline.settings import ScoreSettings

    s = score_document(
        lm, TargetScorer(lm.model), spans_only(text, job["spans"]), ScoreSettings(add_bos=False)
    )
    return {
        "ppl": s.all.perplexity(),
        "longppl": s.key.perplexity(),
        "n_key": int(s.key.n),
        "tokens_scored": int(s.all.n),
    }


def stage2_plain(lm, text, job):
    import torch

    from pipeline.models.logprobs import TargetScorer, full_context_logprobs
    from pipeline.text.tokenization import encode_with_offsets

    ids = encode_with_offsets(lm.tokenizer, text).ids
    nll = -full_context_logprobs(TargetScorer(lm.model), torch.tensor(ids))[1:]
    return {"ppl": float(math.exp(nll.mean())), "tokens_scored": len(nll)}


def stage2_official(lm, text, job):
    from longppl.longppl import compute_longppl

    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write(";".join(f"[{a}, {b}]" for a, b in job["spans"]))
    result = compute_longppl(text, lm.model, None, tokenizer=lm.tokenizer, save_path=handle.name)
    return {
        "ppl": float(result["ppl"]),
        "longppl": None if result["longppl"] is None else float(result["longppl"]),
        "n_key": result["n_key_token"],
        "tokens_scored": int(result["n_token"]) - 1,
    }


def dropin(lm, text, job, compute_longppl):
    """``compute_longppl`` online (evaluator and model), as the official package's users call it."""
    evaluator, model = lm
    result = compute_longppl(
        text,
        model.model,
        evaluator.model,
        model.tokenizer,
        evaluator.tokenizer,
        trunc_len=job["K"],
        sliding_window=job["d"],
    )
    return {
        "ppl": float(result["ppl"]),
        "longppl": None if result["longppl"] is None else float(result["longppl"]),
        "n_key": result["n_key_token"],
        "tokens_scored": int(result["n_token"]) - 1,
    }


def dropin_ours(lm, text, job):
    from pipeline.api.dropin import compute_longppl

    return dropin(lm, text, job, compute_longppl)


def dropin_official(lm, text, job):
    from longppl.longppl import compute_longppl

    return dropin(lm, text, job, compute_longppl)


def spans_only(text: str, spans: list):
    """An ArtifactDocument from key spans alone (the official package's stage 2 has no soft weights)."""
    import numpy as np
    import pyarrow as pa

    from pipeline.artifact.reader import ArtifactDocument

    empty = pa.table(
        {name: pa.array([], pa.int32()) for name in ("char_start", "char_end")}
        | {name: pa.array([], pa.float64()) for name in ("lsd", "long_logprob", "soft_weight")}
    )
    spans_table = pa.table(
        {
            "char_start": pa.array(np.array([a for a, _ in spans], dtype=np.int32)),
            "char_end": pa.array(np.array([b for _, b in spans], dtype=np.int32)),
        }
    )
    return ArtifactDocument("bench", text, empty, spans_table)


TASKS = {
    "stage1-ours": stage1_ours,
    "stage1-official": stage1_official,
    "stage2-ours": stage2_ours,
    "stage2-official": stage2_official,
    "stage2-plain": stage2_plain,
    "dropin-ours": dropin_ours,
    "dropin-official": dropin_official,
}


if __name__ == "__main__":
    child(lambda **job: worker(job))
