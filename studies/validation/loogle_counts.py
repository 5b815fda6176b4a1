"""How many questions each member of `make validate`'s family would count on LooGLE's data, before any
model runs (the answer gain's exclusions need only the tokenizers): which members would reach
``loogle.min_questions``, and so what a run on that data could determine.

    python -m studies.validation.loogle_counts     # the test data (../shared/data/loogle) and the sample
    python -m studies.validation.loogle_counts --data <folder> --json out.json
    python -m studies.validation.loogle_counts --limits 2048 4096 6144 full   # other context limits

Each text is whole (the study's ``max_tokens`` keeps the test data's whole long-dependency texts), each
member at its limit (the model's context for a whole-context member), ``count=all``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from bench.shared import arguments, output_file
from pipeline.artifact.qa import ArtifactQuestion, Evidence
from pipeline.errors import one_line_errors
from pipeline.loogle.data.reading import DataSource, load_questions
from pipeline.loogle.evidence import answer_gain
from pipeline.models.loading import ModelChoice
from pipeline.settings import Compute
from pipeline.text.locating import Document, locate
from studies.validation import family
from studies.validation.loogle_target import TEST_DATA

MODELS = ("smollm2-135m", "gemma3-270m")
LIMITS = (256, 1024, 2048, None)  # the study's members (conf/validate.yaml); None: the model's whole context


def questions(data: str) -> tuple[list[ArtifactQuestion], dict[str, str]]:
    """The long-dependency questions of ``data`` with their evidence located in the whole texts."""
    out, texts = [], {}
    for index, q in enumerate(load_questions("longdep_qa", DataSource(data))):
        document = Document(q.context)
        found = [locate(e, document) for e in q.evidence]
        evidence = tuple(
            Evidence(e, f.rule, f.spans, f.occurrences, f.ratio)
            for e, f in zip(q.evidence, found, strict=True)
        )
        out.append(
            ArtifactQuestion(q.doc_id, index, "longdep_qa", q.qid, q.kind, q.question, q.answer, evidence)
        )
        texts[q.doc_id] = q.context
    return out, texts


def counts(
    data: str,
    limits: tuple[int | None, ...] = LIMITS,
    read: tuple[list[ArtifactQuestion], dict[str, str]] | None = None,
) -> dict[str, Any]:
    """Per member (each model at each of ``limits`` below its context): its counted questions and its
    exclusions by reason, on ``data``'s questions (``read``: as ``questions(data)`` gave them)."""
    asked, texts = read or questions(data)
    out: dict[str, Any] = {"questions": len(asked), "documents": len(texts), "members": {}}
    for spec in MODELS:
        choice = ModelChoice(spec=spec)
        lm = choice.load(Compute(dtype="float32", device="cpu"))
        for limit in limits:
            if limit is not None and limit >= lm.context_length:
                continue  # the model's whole context is the member `full`
            window = limit or lm.context_length
            planned = [answer_gain.plan(lm.tokenizer, q, texts[q.doc_id], window) for q in asked]
            reasons = Counter(
                "counted" if isinstance(p, answer_gain.Planned) else p.excluded for p in planned
            )
            out["members"][family.default_label(choice, limit)] = dict(reasons)
    return out


def limit_arg(text: str) -> int | None:
    """A context limit: a number of tokens (at least 2), or ``full`` (the model's whole context)."""
    if text == "full":
        return None
    if not text.isdigit() or int(text) < 2:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of tokens (at least 2) or full")
    return int(text)


def data_arg(text: str) -> str:
    """A data source: ``sample``, ``hub`` or a folder that exists (its files are read before any model
    loads)."""
    if text in ("sample", "hub") or Path(text).is_dir():
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is no folder here: sample, hub or a folder of LooGLE's files")


def main() -> None:
    with one_line_errors():
        parser = arguments(__doc__.splitlines()[0])
        parser.add_argument("--data", nargs="+", type=data_arg, default=[str(TEST_DATA), "sample"])
        parser.add_argument(
            "--limits", nargs="+", type=limit_arg, default=list(LIMITS), metavar="LIMIT",
            help="context limits in tokens, or full (default: the study's: 256 1024 2048 full)",
        )  # fmt: skip
        parser.add_argument("--json", type=output_file, help="write the counts here too (its folder exists)")
        args = parser.parse_args()
        limits = tuple(dict.fromkeys(args.limits))
        read = {d: questions(d) for d in args.data}  # every data set checked before any model loads
        out = {("test data" if Path(d) == TEST_DATA else d): counts(d, limits, read[d]) for d in args.data}
        print(json.dumps(out, indent=1))
        if args.json:
            args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
