"""A rehearsal of LongPPL at 128k tokens on the CPU (`make rehearse-long`): ``preset=long`` stage 1,
``make score`` and ``make ladder`` end to end on texts of 131071 reference tokens, with tiny
random-weight models, checked against the preset (docs/long.md).

1. Inputs: a copy of ``emozilla/pg19-test`` in its layout (Parquet; short_book_title,
   publication_date, url, text): books made of the shipped GovReport reports joined twice over
   (each more than 131072 reference tokens) and one short book that the selection drops. The
   reference tokenizer plays Llama-2's part: a byte-level BPE of 2000 entries trained on the sample,
   less efficient than the evaluator's (131071 of its tokens are about 107,000 of the evaluator's, as
   Llama-2's against Llama-3's), so the texts fit a 128k context. The evaluator is shaped like
   Llama-3.1-8B (128256 entries, llama3 RoPE scaling, 128k context) with two narrow layers and the
   embedded SmolLM2 tokenizer, in bfloat16 with the float32 head; the scored models are Qwen2-7B's
   shape (128k context) and Mistral-7B's (32k context, which must refuse the texts).
2. ``python -m pipeline.commands.keytokens preset=long`` with the local copies and ``device=cpu
   head_dtype=float32``: the texts whole, K=4096, d=1024, no BOS before the short windows.
3. ``python -m pipeline.commands.score`` with the 128k model on that artifact; with the 32k model it must stop
   with the context error (``context_limit=`` or ``allow_truncation=true``).
4. The span files of the tokens of largest LSD imported (``python -m pipeline.commands.import_official
   corpus=pg19_long``: a random evaluator finds no key token with alpha=2, beta=-2), then
   ``python -m pipeline.commands.ladder`` on them with rungs 4096 to 65536 and the full text: the effective
   context length and its interval.

The configuration, the artifact, its texts and each step's peak memory are checked against the preset
(``studies.rehearsal_checks.LONG``): ``--set corpus.max_ids=131072`` fails it. Prints each step's wall time
and peak memory (resident set of its process tree).

    make rehearse-long                          # 1 book, about 15 minutes on 2 cores
    make rehearse-long ARGS="--set corpus.max_ids=131072"   # fails
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from bench.shared import ROOT, arguments, whole
from studies.rehearsal_checks import LONG, LONG_CONFIG, RehearsalFailure, check_texts, check_values
from studies.rehearse_paper import (
    Step,
    build_models,
    embedded_tokenizer,
    run_rehearsal,
    sample_reports,
    trained_tokenizer,
    write_span_files,
)

LADDER = [4096, 8192, 16384, 32768, 65536]
REFERENCE_VOCAB = 2000
MAX_GIB = 8.0  # no step may hold more: full-vocabulary logits of one text would be 62.6 GiB
WHOSE = "preset=long's"


def build_books(out: Path, reference, documents: int) -> list[dict]:
    """``emozilla/pg19-test`` in its layout: books of the shipped reports joined twice over in rotated
    orders, the second one short (dropped); returns the rows with their reference ids."""
    import datasets

    reports = sample_reports()
    books = ["\n\n".join((reports[i:] + reports[:i]) * 2) for i in range(0, 4 * documents, 4)]
    books.insert(1, reports[6])
    rows = []
    for i, text in enumerate(books):
        ids = reference(text, add_special_tokens=False)["input_ids"]
        rows.append({"short_book_title": f"Book {i}", "publication_date": 1900 + i, "url": f"book/{i}"})
        rows[-1].update(text=text, input_ids=ids, tokenized_len=len(ids))
    columns = {"short_book_title": "string", "publication_date": "int32", "url": "string", "text": "string"}
    features = datasets.Features({k: datasets.Value(v) for k, v in columns.items()})
    data = datasets.Dataset.from_list([{k: row[k] for k in columns} for row in rows], features=features)
    (out / "data").mkdir(parents=True)
    data.to_parquet(str(out / "data/test-00000-of-00001.parquet"))
    return rows


def preflight(extra: list[str]) -> None:
    """preset=long as the command composes it, against the preset's run, before anything runs."""
    from omegaconf import OmegaConf

    from pipeline.commands.shell import compose

    config = OmegaConf.to_container(compose("keytokens", ["preset=long", *extra]), resolve=True)
    check_values(config, LONG_CONFIG, "preset=long", WHOSE)


def local_sources(work: Path, documents: int) -> list[str]:
    books, reference = work / "pg19-test", work / "tokenizers/reference"
    return [f"corpus.dataset={books}", f"corpus.tokenized_with={reference}", f"corpus.limit={documents}"]


def stage1(work: Path, models: dict[str, Path], documents: int, extra: list[str]) -> Step:
    command = [
        sys.executable,
        "-m",
        "pipeline.commands.keytokens",
        "preset=long",
        f"evaluator.spec={models['evaluator']}",
    ]
    command += [*local_sources(work, documents), "device=cpu", "head_dtype=float32"]
    command += [f"output_dir={work / 'keytokens'}", "name=long", "progress=false", *extra]
    return Step("stage 1 (preset=long)", command, work / "stage1.log")


def check_artifact(work: Path, rows: list[dict], reference, documents: int):
    """The artifact's settings and texts are preset=long's, none cut, each recording its length."""
    from pipeline.artifact.reader import load_artifact

    art = load_artifact(work / "keytokens/long")
    check_values(
        art.settings, {**LONG, "head_dtype": "float32", "corpus.limit": documents}, "the artifact", WHOSE
    )
    docs = art.documents.to_pylist()
    if any(d["truncated"] for d in docs) or max(d["n_tokens"] for d in docs) > 131072:
        raise RehearsalFailure(
            f"a document was cut or is beyond 128k tokens: {[d['n_tokens'] for d in docs]}"
        )
    check_texts(art.texts(), rows, reference, documents, LONG)
    recorded = [d.get("reference_tokens") for d in art.manifest["documents"]]
    kept = [row["tokenized_len"] for row in rows if row["tokenized_len"] >= 131072][:documents]
    if recorded != kept:
        raise RehearsalFailure(f"the manifest records reference lengths {recorded}, the books have {kept}")
    return art


def score_step(work: Path, artifact: Path, model: Path, name: str) -> Step:
    command = [sys.executable, "-m", "pipeline.commands.score", f"model.spec={model}", f"model.name={name}"]
    command += [f"artifact={artifact}", f"results={work / 'scores.jsonl'}", "progress=false"]
    return Step(f"make score ({name})", command, work / f"score-{name}.log")


def check_refusal(work: Path, art, model: Path, steps: list[Step]) -> None:
    """A 32k-context model refuses the 128k texts with the context error, naming both ways out."""
    step = score_step(work, art.root, model, "Mistral-7B-shaped")
    step.name += ", 32k context: must refuse"
    steps.append(step)
    try:
        step.run()
    except RehearsalFailure as exc:
        if "context_limit=<tokens>" in str(exc) and "allow_truncation=true" in str(exc):
            return
        raise
    raise RehearsalFailure("a 32k-context model scored 128k-token texts without context_limit")


def import_step(work: Path, models: dict[str, Path], documents: int) -> Step:
    command = [
        sys.executable,
        "-m",
        "pipeline.commands.import_official",
        "official=llama3.1-8b",
        "corpus=pg19_long",
    ]
    command += [f"spans_dir={work / 'key_text'}", f"official.tokenizer={models['evaluator']}"]
    command += [*local_sources(work, documents), f"output_dir={work / 'imported'}", "progress=false"]
    return Step("import the top-LSD spans", command, work / "import.log")


def ladder_step(work: Path, artifact: Path, model: Path) -> Step:
    command = [
        sys.executable,
        "-m",
        "pipeline.commands.ladder",
        f"model.spec={model}",
        "model.name=Qwen2-7B-shaped",
    ]
    command += [f"artifact={artifact}", f"ladder=[{','.join(map(str, LADDER))}]", "progress=false"]
    command += [f"results={work / 'ladder.jsonl'}", f"plot_dir={work / 'ladder'}"]
    command += [f"forgetting_results={work / 'forgetting.jsonl'}"]
    return Step("make ladder (4096 to 65536, full)", command, work / "ladder.log")


def check_ladder(work: Path) -> dict:
    """Rungs 4096 ... 65536 and full context, each with the key tokens' NLL; a reading of the
    effective length with its interval; returns the line."""
    line = json.loads((work / "ladder.jsonl").read_text().splitlines()[-1])
    limits = [rung["context_limit"] for rung in line["rungs"]]
    if limits != [*LADDER, None]:
        raise RehearsalFailure(f"the ladder's rungs are {limits}, not {[*LADDER, None]}")
    effective = line["effective"]
    if effective.get("undefined") or effective.get("interval") is None:
        raise RehearsalFailure(f"no effective length at 128k: {effective}")
    return line


def check_memory(steps: list[Step]) -> None:
    heavy = [f"{s.name}: {s.peak:.2f} GiB" for s in steps if s.peak > MAX_GIB]
    if heavy:
        raise RehearsalFailure(f"memory beyond {MAX_GIB} GiB at 128k tokens: " + "; ".join(heavy))


def rehearse(work: Path, documents: int, extra: list[str], steps: list[Step]) -> None:
    """Every step in order, each checked; a failure raises RehearsalFailure."""
    preflight(extra)
    print(f"the configs are preset=long's ({' '.join(['preset=long', *extra])})", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    reference = trained_tokenizer(work / "tokenizers/reference", REFERENCE_VOCAB)
    models = build_models(work, embedded_tokenizer("smollm2-135m", work / "tokenizers/evaluator"))
    rows = build_books(work / "pg19-test", reference, documents)
    print(f"inputs: books of {[row['tokenized_len'] for row in rows]} reference tokens", flush=True)

    def run(step: Step) -> None:
        steps.append(step)
        step.run()

    run(stage1(work, models, documents, extra))
    art = check_artifact(work, rows, reference, documents)
    run(score_step(work, art.root, models["Qwen2-7B"], "Qwen2-7B-shaped"))
    check_refusal(work, art, models["Mistral-7B-Instruct-v0.2"], steps)
    write_span_files(art, work / "key_text")
    run(import_step(work, models, documents))
    imported = next((work / "imported").iterdir())
    run(ladder_step(work, imported, models["Qwen2-7B"]))
    line = check_ladder(work)
    check_memory(steps)
    docs = art.documents.to_pandas()
    print(
        f"\nstage 1: {len(docs)} books of {docs.n_tokens.tolist()} evaluator tokens; ladder: effective "
        f"length {line['effective']['length']} (interval {line['effective']['interval']}, "
        f"tolerance {line['effective']['tolerance']})"
    )


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--documents", type=whole(1), default=1, help="long books (default 1)")
    parser.add_argument("--work", default=str(ROOT / "artifacts/rehearsal-long"), help="its files (replaced)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a stage 1 override")
    args = parser.parse_args()
    steps: list[Step] = []
    run_rehearsal(
        lambda: rehearse(Path(args.work), args.documents, args.set, steps),
        steps,
        f"preset=long stage 1, make score and make ladder at 131071 reference tokens, each step within "
        f"{MAX_GIB:g} GiB (work files in {args.work})",
    )


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
