"""What the answer gain's join moves: each member of `make validate`'s family on the embedded sample's
long-dependency questions, the answer read as it follows the prompt (``join="follows"``: the prompt
without its trailing space, then " " + answer) against the join before it (``"apart"``: the prompt as
LooGLE writes it, "...Answer: ", then the answer's own tokens), counted as the run before counted
(``count="some"``); and each metric's correlation with the mean gain both ways, from a results.json of
that family on the same documents (its PPL, LongPPL and LongPPL-soft).

    python -m studies.validation.loogle_join --results <results.json> --json out.json
"""

from __future__ import annotations

import json
from typing import Any

from bench.shared import arguments, existing, output_file
from pipeline.artifact.qa import ArtifactQuestion, Evidence
from pipeline.errors import PipelineError, one_line_errors
from pipeline.loogle.data.reading import DataSource, load_questions
from pipeline.loogle.evidence import answer_gain
from pipeline.models.loading import ModelChoice
from pipeline.models.logprobs import scorer_for
from pipeline.results.correlations import correlate
from pipeline.settings import Compute
from pipeline.text.locating import Document, locate

COMPUTE = Compute(dtype="float32", device="cpu", head_chunk=1024, vocab_tile=8192)  # conf/validate.yaml's
MEMBERS = {"smollm2-135m": [256, 1024, 2048, None], "gemma3-270m": [256, 1024, 2048, None]}


def sample_questions() -> tuple[list[ArtifactQuestion], dict[str, str]]:
    """The sample's long-dependency questions with their evidence located in the whole texts."""
    questions, texts = [], {}
    for index, q in enumerate(load_questions("longdep_qa", DataSource())):
        document = Document(q.context)
        found = [locate(e, document) for e in q.evidence]
        evidence = tuple(
            Evidence(e, f.rule, f.spans, f.occurrences, f.ratio)
            for e, f in zip(q.evidence, found, strict=True)
        )
        source = f"longdep_qa/{q.qid}"
        questions.append(
            ArtifactQuestion(q.doc_id, index, "longdep_qa", source, q.kind, q.question, q.answer, evidence)
        )
        texts[q.doc_id] = q.context
    return questions, texts


def member_gains(spec: str, limits: list[int | None]) -> dict[str, Any]:
    """Each limit's gains of one model, both joins (nats and bits per byte per counted question)."""
    questions, texts = sample_questions()
    lm = ModelChoice(spec=spec).load(COMPUTE)
    scorer = scorer_for(lm, COMPUTE)
    scorer.check_against_full_forward()
    out = {}
    for limit in limits:
        label = f"{spec} {'full' if limit is None else f'W={limit}'}"
        window = [limit or lm.context_length]
        both = {j: answer_gain.answer_gains(lm.tokenizer, scorer, questions, texts, window, "some", j)
                for j in answer_gain.JOINS}  # fmt: skip
        out[label] = {
            join: {
                g.source_id: {"nats": g.nats, "bits_per_byte": g.bits_per_byte}
                for g in gains
                if g.excluded is None
            }
            for join, gains in both.items()
        }
    return out


def correlations(gains: dict[str, Any], results: dict[str, Any]) -> dict[str, Any]:
    """Each metric of ``results``' family against each member's mean gain (bits per byte), both joins."""
    rows = {r["label"]: r["loogle"] for r in results["family"]}
    labels = [label for label in gains if label in rows and gains[label]["follows"]]
    out = {}
    for join in answer_gain.JOINS:
        means = [
            sum(q["bits_per_byte"] for q in gains[m][join].values()) / len(gains[m][join]) for m in labels
        ]
        out[join] = {metric: correlate([rows[m][metric] for m in labels], means)[0]
                     for metric in ("ppl", "longppl", "longppl_soft")}  # fmt: skip
    return {"members": labels, **out}


def main() -> None:
    with one_line_errors():
        parser = arguments(__doc__.splitlines()[0])
        parser.add_argument(
            "--results", type=existing, required=True, help="a results.json of the family on the sample"
        )
        parser.add_argument("--json", type=output_file, help="write the gains here too (its folder exists)")
        args = parser.parse_args()
        try:
            results = json.loads(args.results.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise PipelineError(f"--results {args.results}: no results.json ({exc})") from None
        family = results.get("family") if isinstance(results, dict) else None
        if not isinstance(family, list) or not all(isinstance(r, dict) and {"label", "loogle"} <= r.keys()
                                                   for r in family):  # fmt: skip
            raise PipelineError(
                f"--results {args.results}: no family with LooGLE metrics (a results.json of `make "
                "validate` on the sample: docs/reports/validation/results.json)"
            )
        gains: dict[str, Any] = {}
        for spec, limits in MEMBERS.items():
            gains |= member_gains(spec, limits)
        out = {"gains": gains, "correlations": correlations(gains, results)}
        print(json.dumps(out["correlations"], indent=1))
        if args.json:
            args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
