"""What limits LooGLE's decoding of a cut prompt on the CPU, part by part, in one process: SmolLM2
(8k context) on the first document of the embedded sample's long-dependency questions, whose prompts
are cut to 7,692 tokens and share their first half.

    python -m bench.loogle_decode_parts --json docs/reports/loogle/decode-limits-smollm2-cpu.json

Wall and CPU seconds of: the whole prompt's prefill (one question at a time), the shared half (once
per document), each question's own half after it (the two fused passes of ``CausalAfterCache``, and
the one masked pass they replaced), and 20 decoding steps at the prompt's length: one sequence on
transformers' ``DynamicCache`` (``generate``'s), one and 8 sequences on ``InPlaceLayer``s, and the
weights alone (no cache).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from bench import runner, shared
from pipeline.reporting.common import many

STEPS = 20


def timed(out: dict[str, Any], label: str, work: Callable[[], Any]) -> Any:
    """Run ``work``, record its wall and CPU seconds in ``out[label]``; its result."""
    with runner.Clock(cpu=runner.own_cpu) as clock:
        result = work()
    out[label] = {"wall_s": round(clock.seconds, 2), "cpu_s": round(clock.cpu_s, 2)}
    print(label, out[label], flush=True)
    return result


def steps(model: Any, cache: Any, batch: int, length: int) -> None:
    """``STEPS`` greedy steps of ``batch`` sequences of ``length`` tokens held by ``cache``."""
    import torch

    token, mask = torch.full((batch, 1), 500), torch.ones(batch, length, dtype=torch.long)
    for step in range(STEPS):
        mask = torch.cat([mask, mask.new_ones(batch, 1)], dim=1)
        position = torch.full((batch, 1), length + step)
        model(
            input_ids=token, attention_mask=mask, position_ids=position, past_key_values=cache, use_cache=True
        )


def measure(spec: str) -> dict[str, Any]:
    import torch

    from pipeline.loogle.data.prompts import max_new_tokens
    from pipeline.loogle.data.reading import DataSource, load_questions
    from pipeline.loogle.generation import batched
    from pipeline.loogle.generation.answering import prompt_limit
    from pipeline.loogle.generation.decoding import cut_prompt
    from pipeline.models import attention
    from pipeline.models.loading import ModelChoice
    from pipeline.settings import Compute

    lm = ModelChoice(spec=spec).load(Compute(dtype="float32", device="cpu"))
    model, task = lm.model, "longdep_qa"
    questions = load_questions(task, DataSource())
    budget = prompt_limit(lm.context_length, None, max_new_tokens()[task], task)
    cuts = [cut_prompt(lm.tokenizer, q, budget) for q in questions if q.doc_id == questions[0].doc_id]
    ids, share = cuts[0].ids, batched.common_prefix(cuts)
    out: dict[str, Any] = {"model": spec, "prompt_tokens": len(ids), "shared": share, "steps": STEPS}
    with torch.no_grad():
        timed(out, "whole prompt prefill", lambda: batched.prefill(model, ids))
        prefix = timed(out, "shared half prefill", lambda: batched.prefill(model, ids[:share]))
        own = copy.deepcopy(prefix)
        timed(out, "own half after it: two passes", lambda: batched.forward(model, ids[share:], own))
        masked = copy.deepcopy(prefix)
        attention.AttentionMaskInterface.register(attention.NAME, attention.sdpa_mask)
        try:
            timed(out, "own half after it: one masked pass (before)",
                  lambda: batched.forward(model, ids[share:], masked))  # fmt: skip
        finally:
            attention.AttentionMaskInterface.register(attention.NAME, attention.window_mask)
        dynamic = copy.deepcopy(own)
        timed(out, f"{STEPS} steps, 1 sequence, DynamicCache (generate's)",
              lambda: steps(model, dynamic, 1, len(ids)))  # fmt: skip
        for batch in (1, 8):
            cache = batched.stack((copy.deepcopy(own) for _ in range(batch)), batch, len(ids), STEPS)
            timed(
                out,
                f"{STEPS} steps, {many(batch, 'sequence')}, in place",
                lambda cache=cache, batch=batch: steps(model, cache, batch, len(ids)),
            )
        timed(out, f"{STEPS} steps, weights only (no cache)",
              lambda: [model(input_ids=torch.tensor([[500]]), use_cache=False) for _ in range(STEPS)])  # fmt: skip
    return out


def main() -> None:
    parser = shared.arguments(__doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--json", type=shared.output_file)
    args = parser.parse_args()
    out = {**measure(args.model), "stamp": runner.stamp(), "machine": runner.machine()}
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
