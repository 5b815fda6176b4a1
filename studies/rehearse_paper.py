"""A rehearsal of the paper's run on the CPU (`make rehearse-paper`): every code path of the first GPU
run (docs/gpu.md) but the GPU kernels, at the paper's lengths, with tiny random-weight models.

1. Inputs: a copy of ``emozilla/govreport-test-tokenized`` in its format (the Hub's parquet layout,
   columns id, pid, input, output, input_ids, attention_mask, tokenized_len; ids without BOS), built
   from the shipped GovReport sample: long rows of more than 32767 reference tokens and a short one
   that the selection drops. The reference tokenizer (Llama-2's, in the paper) is the embedded
   Gemma 3 tokenizer, SentencePiece like Llama-2's; the evaluator is shaped like Llama-3.1-8B
   (vocabulary of 128256 entries, llama3 RoPE scaling, 128k context, grouped-query attention) but two
   narrow layers, with the embedded SmolLM2 tokenizer (byte-level BPE, like Llama-3's), in bfloat16
   with the float32 head.
2. ``python -m pipeline.commands.keytokens preset=paper evaluator=llama3.1-8b`` with the local copies and
   ``device=cpu head_dtype=float32`` (on a GPU ``head_dtype=auto`` is float32): the full 32767-token
   texts, K=4096, d=1024, no BOS before the short windows.
3. Span files in the official format (``[start, end];...``, one per key token) for these documents
   (the tokens of largest LSD: a random evaluator finds no key token with alpha=2, beta=-2), then
   ``python -m pipeline.commands.import_official official=llama3.1-8b`` on them.
4. ``python -m pipeline.commands.leaderboard_refresh refresh=official-llama3.1-8b record=true`` with two tiny
   evaluated models in bfloat16 on the imported artifact, add_bos=false as the official config says
   (Qwen2-7B's shape: 128k context, the evaluator's tokenizer; Mistral-7B's: 32000 entries, 32k
   context, a 4096-token sliding window, with a byte-level BPE trained on the sample); then the
   refresh's own comparison (aggregate ``official``) of those results with expected values: their
   official aggregation passes, 3% off fails.

Before it runs and after each step, the configuration, the artifact and its texts are checked
against the paper's run as ``studies.rehearsal_checks`` writes it from the paper and the official
code: a broken preset setting (``--set short_window_bos=true``, ``--set corpus.max_ids=32768``)
fails the rehearsal. Prints each step's wall time and peak memory (resident set of its process tree).

    make rehearse-paper                          # 3 documents, about 10 minutes on 2 cores
    make rehearse-paper ARGS="--documents 1"
    make rehearse-paper ARGS="--set short_window_bos=true"   # fails
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.runner import run_process
from bench.shared import GIB, ROOT, arguments, whole
from studies.random_models import LLAMA3_ROPE, SMALL, config, random_model
from studies.rehearsal_checks import (
    OFFICIAL_IMPORT,
    OFFICIAL_SCORING,
    PAPER,
    PAPER_CONFIG,
    RehearsalFailure,
    check_texts,
    check_values,
)

SHAPE = {**SMALL, "tie_word_embeddings": False}


def embedded_tokenizer(name: str, out: Path):
    """The tokenizer of an embedded model (its GGUF converted once into the cache), saved to ``out``."""
    from transformers import AutoTokenizer

    from pipeline.models.gguf import convert_gguf
    from pipeline.models.sources import EMBEDDED_MODELS

    checkpoint, _ = convert_gguf(EMBEDDED_MODELS[name].gguf_path())
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    tokenizer.save_pretrained(out)
    return tokenizer


def save_model(config, tokenizer, out: Path, seed: int) -> Path:
    """A random-weight causal LM of ``config`` in bfloat16 (weights x4: log-probs that depend on the
    context), with its tokenizer."""
    import torch

    config.bos_token_id, config.eos_token_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    model = random_model(config, seed=seed, dtype=torch.float32, scale=4.0)
    model.to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def trained_tokenizer(out: Path, vocab_size: int = 32000):
    """A byte-level BPE trained on the shipped sample (at most 32000 entries, Mistral's vocabulary;
    the sample gives about 12000) with BOS <s> and EOS </s>: the Mistral-shaped model's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<s>", "</s>"], initial_alphabet=alphabet, show_progress=False
    )
    tokenizer.train_from_iterator(sample_reports(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(out)
    return fast


def sample_reports() -> list[str]:
    return [json.loads(line)["text"] for line in (ROOT / "data/govreport-sample.jsonl").open()]


def build_models(work: Path, evaluator_tokenizer) -> dict[str, Path]:
    """The evaluator (Llama-3.1-8B's shape) and the two evaluated models of the official refreshes
    (Qwen2-7B's: 128k context, the evaluator's tokenizer; Mistral-7B's: 32000 entries, 32k context,
    a sliding window of 4096 as in v0.1, so that blocked_sdpa's band path runs at 32k)."""
    llama = config(
        "llama", vocab_size=128256, max_position_embeddings=131072, rope_parameters=LLAMA3_ROPE, **SHAPE
    )
    qwen2 = config("qwen2", vocab_size=len(evaluator_tokenizer), max_position_embeddings=131072, **SHAPE)
    mistral = config("mistral", vocab_size=32000, max_position_embeddings=32768, sliding_window=4096, **SHAPE)
    mistral_tokenizer = trained_tokenizer(work / "tokenizers/mistral")
    return {
        "evaluator": save_model(llama, evaluator_tokenizer, work / "models/Llama-3.1-shaped", 0),
        "Qwen2-7B": save_model(qwen2, evaluator_tokenizer, work / "models/Qwen2-7B-shaped", 1),
        "Mistral-7B-Instruct-v0.2": save_model(
            mistral, mistral_tokenizer, work / "models/Mistral-7B-shaped", 2
        ),
    }


def build_dataset(out: Path, reference, documents: int, repeat: int = 1) -> list[dict]:
    """``emozilla/govreport-test-tokenized`` in its format: rows of the shipped GovReport sample's
    reports joined in rotated orders (each far more than 32767 reference tokens; ``repeat`` times over
    for longer texts), the second row one short report (dropped by the selection), ids without BOS,
    tokenized_len = len(input_ids)."""
    import datasets

    reports = sample_reports()
    texts = ["\n\n".join((reports[i:] + reports[:i]) * repeat) for i in range(0, 4 * documents, 4)]
    texts.insert(1, reports[6])
    rows = []
    for i, text in enumerate(texts):
        ids = reference(text, add_special_tokens=False)["input_ids"]
        rows.append({"id": f"RS_{i}", "pid": f"RS_{i}_0", "input": text, "output": "", "input_ids": ids})
        rows[-1].update(attention_mask=[1] * len(ids), tokenized_len=len(ids))
    features = datasets.Features(
        {
            **{k: datasets.Value("string") for k in ("id", "pid", "input", "output")},
            "input_ids": datasets.Sequence(datasets.Value("int32")),
            "attention_mask": datasets.Sequence(datasets.Value("int8")),
            "tokenized_len": datasets.Value("int64"),
        }
    )
    data = datasets.Dataset.from_list(rows, features=features)
    (out / "data").mkdir(parents=True)
    data.to_parquet(str(out / "data/test-00000-of-00001.parquet"))
    return rows


class Step:
    """A command of the rehearsal in a subprocess: its wall time and the peak resident memory of its
    process tree (sampled every 0.1 s); a failure is a RehearsalFailure with its last error line."""

    def __init__(self, name: str, command: list[str], log: Path):
        self.name, self.command, self.log = name, command, log
        self.seconds = self.peak = 0.0

    def run(self) -> None:
        print(f"\n== {self.name}: {' '.join(self.command)}", flush=True)
        record, _ = run_process(self.command, log=self.log)
        self.seconds, self.peak = record["seconds"], record["peak_bytes"] / GIB
        lines = self.log.read_text().splitlines()
        print("\n".join([line for line in lines if not line.startswith(("Loading", "Writing"))][-12:]))
        if record["returncode"] != 0:
            last = lines[-1] if lines else "no output"
            error = next((line for line in reversed(lines) if line.startswith("error:")), last)
            raise RehearsalFailure(f"{self.name} failed (exit status {record['returncode']}): {error}")


def preflight(extra: list[str]) -> None:
    """The configs as the commands compose them, against the paper's run, before anything runs."""
    from omegaconf import OmegaConf

    from pipeline.commands.shell import compose

    def composed(name: str, overrides: list[str]) -> dict:
        return OmegaConf.to_container(compose(name, overrides), resolve=True)

    check_values(composed("keytokens", ["preset=paper", *extra]), PAPER_CONFIG, "preset=paper")
    official = composed("leaderboard_refresh", ["refresh=official-llama3.1-8b"])
    check_values(official, OFFICIAL_SCORING, "refresh=official-llama3.1-8b")
    check_values(composed("import_official", []), OFFICIAL_IMPORT, "make import-official")


def local_sources(work: Path, documents: int) -> list[str]:
    dataset, reference = work / "govreport-test-tokenized", work / "tokenizers/reference"
    return [f"corpus.dataset={dataset}", f"corpus.tokenized_with={reference}", f"corpus.limit={documents}"]


def stage1(work: Path, models: dict[str, Path], documents: int, extra: list[str]) -> Step:
    command = [sys.executable, "-m", "pipeline.commands.keytokens", "preset=paper", "evaluator=llama3.1-8b"]
    command += [f"evaluator.spec={models['evaluator']}", *local_sources(work, documents)]
    command += ["device=cpu", "head_dtype=float32", f"output_dir={work / 'keytokens'}", "name=paper"]
    return Step("stage 1 (preset=paper)", [*command, "progress=false", *extra], work / "stage1.log")


def check_artifact(work: Path, rows: list[dict], reference, documents: int):
    """The artifact's settings and texts are the paper's; returns it."""
    from pipeline.artifact.reader import load_artifact

    art = load_artifact(work / "keytokens/paper")
    check_values(art.settings, {**PAPER, "head_dtype": "float32", "corpus.limit": documents}, "the artifact")
    if "numerics" not in art.settings:
        raise RehearsalFailure(
            "a bfloat16 artifact without its numerics record (head blocks, window batches)"
        )
    docs = art.documents.to_pylist()
    if any(d["truncated"] for d in docs):
        raise RehearsalFailure("a document was cut by the evaluator: the paper's texts never are")
    check_texts(art.texts(), rows, reference, documents)
    return art


def write_span_files(art, folder: Path, share: float = 0.02) -> dict[str, list[tuple[int, int]]]:
    """Span files in the official format for the artifact's documents: each document's tokens of
    largest LSD (``share`` of those with a short context), one ``[start, end]`` per token, sorted;
    returns the merged spans the import must give."""
    import numpy as np

    from pipeline.definition import merge_spans
    from pipeline.official.span_files import format_spans

    folder.mkdir(parents=True)
    tokens, merged = art.tokens.to_pandas(), {}
    for i, doc_id in enumerate(art.documents["doc_id"].to_pylist()):
        rows = tokens[(tokens.doc_id == doc_id) & tokens.lsd.notna()]
        top = rows.nlargest(max(1, int(share * len(rows))), "lsd").sort_values(["char_start", "char_end"])
        starts, ends = top.char_start.to_numpy(), top.char_end.to_numpy()
        (folder / f"slice_{i}.txt").write_text(format_spans(starts, ends))
        a, b, _ = merge_spans(starts, ends)
        merged[doc_id] = list(zip(a.tolist(), b.tolist(), strict=True))
    assert all(np.all(np.diff(np.array(v)[:, 0]) > 0) for v in merged.values())
    return merged


def import_step(work: Path, models: dict[str, Path], documents: int) -> Step:
    command = [sys.executable, "-m", "pipeline.commands.import_official", "official=llama3.1-8b"]
    command += [f"spans_dir={work / 'key_text'}", f"official.tokenizer={models['evaluator']}"]
    command += [*local_sources(work, documents), f"output_dir={work / 'imported'}", "progress=false"]
    return Step("import the span files (make import-official)", command, work / "import.log")


def check_import(work: Path, merged: dict[str, list[tuple[int, int]]]):
    from pipeline.artifact.reader import load_artifact

    art = load_artifact(next((work / "imported").iterdir()))
    if art.manifest["boundary_check"]["share"] != 1.0:
        raise RehearsalFailure(f"the import's boundary check: {art.manifest['boundary_check']}")
    spans = art.spans.to_pandas()
    got = {d: list(zip(g.char_start, g.char_end, strict=True)) for d, g in spans.groupby("doc_id")}
    if got != merged:
        raise RehearsalFailure("the imported key spans are not those of the span files")
    return art


def refresh_step(work: Path, art, models: dict[str, Path]) -> Step:
    """The official refresh (its config file, as `make leaderboard-refresh-official` runs it) on the
    imported artifact with the tiny evaluated models, recording their results."""
    pinned = ",".join(
        f"{{name: {name}, spec: '{models[name]}', revision: null}}"
        for name in ("Qwen2-7B", "Mistral-7B-Instruct-v0.2")
    )
    command = [sys.executable, "-m", "pipeline.commands.leaderboard_refresh", "refresh=official-llama3.1-8b"]
    command += [f"artifact={art.root}", f"fingerprint={art.manifest['fingerprint']}", f"models=[{pinned}]"]
    command += [f"recorded={work / 'recorded.jsonl'}", f"work_dir={work / 'refresh'}", "settings.device=cpu"]
    return Step("official refresh (record=true)", [*command, "record=true"], work / "refresh.log")


def compare_as_the_refresh_does(work: Path, art) -> dict[str, dict[str, float]]:
    """The recorded results, scored as the official code scores (no special tokens, bfloat16),
    compared by the refresh's own check (``check_model``, aggregate ``official``) with expected values:
    their official aggregation passes, the same values 3% off fail (tolerance 2%)."""
    from omegaconf import OmegaConf

    from pipeline.commands.shell import compose
    from pipeline.score.sums import official_aggregate
    from pipeline.settings import parse
    from pipeline.sharing import refresh

    rows = [json.loads(line) for line in (work / "recorded.jsonl").read_text().splitlines()]
    expected = {row["model_name"]: official_aggregate(row["documents"]) for row in rows}
    config = OmegaConf.to_container(
        compose("leaderboard_refresh", ["refresh=official-llama3.1-8b"]), resolve=True
    )
    for row in rows:
        check_values(
            row["settings"], {"add_bos": False, "dtype": "bfloat16"}, f"{row['model_name']}'s result"
        )
        for scale, passes in ((1.0, True), (1.03, False)):
            values = {k: v * scale for k, v in expected[row["model_name"]].items()}
            models = [{"name": row["model_name"], "spec": "recorded", "expected": values}]
            settings = parse(refresh.Refresh, {**config, "artifact": str(art.root), "models": models})
            problems = refresh.check_model(settings, settings.pinned()[0], row, values)
            if (not problems) != passes:
                raise RehearsalFailure(
                    f"the refresh's comparison of {row['model_name']}: {problems or 'passed'}"
                )
    return expected


def rehearse(work: Path, documents: int, extra: list[str], steps: list[Step], checked: bool = True) -> None:
    """Every step in order, each checked; a failure raises RehearsalFailure. ``checked=False`` skips
    the configs' check (the artifact's own check then catches a broken setting after stage 1)."""
    if checked:
        preflight(extra)
        print(f"the configs are the paper's run (preset=paper {' '.join(extra)})", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.perf_counter()
    reference = embedded_tokenizer("gemma3-270m", work / "tokenizers/reference")
    evaluator_tokenizer = embedded_tokenizer("smollm2-135m", work / "tokenizers/evaluator")
    models = build_models(work, evaluator_tokenizer)
    rows = build_dataset(work / "govreport-test-tokenized", reference, documents)
    lengths = [row["tokenized_len"] for row in rows]
    print(f"inputs: rows of {lengths} reference tokens ({time.perf_counter() - started:.0f} s)", flush=True)

    def run(step: Step) -> None:
        steps.append(step)
        step.run()

    run(stage1(work, models, documents, extra))
    art = check_artifact(work, rows, reference, documents)
    merged = write_span_files(art, work / "key_text")
    run(import_step(work, models, documents))
    imported = check_import(work, merged)
    run(refresh_step(work, imported, models))
    expected = compare_as_the_refresh_does(work, imported)
    docs = art.documents.to_pandas()
    print(
        f"\nstage 1: {len(docs)} documents of {docs.n_tokens.tolist()} evaluator tokens, "
        f"{int(docs.n_key_tokens.sum())} key tokens (random weights); "
        f"import: {sum(len(v) for v in merged.values())} merged spans; official aggregation: {expected}"
    )


def run_rehearsal(rehearse: Callable[[], None], steps: list[Step], passed: str) -> None:
    """Run a rehearsal: each step's time and peak memory, then that it passed (``passed`` says what),
    or the failure in one ``error:`` line and exit status 2."""
    started = time.perf_counter()
    try:
        rehearse()
    except RehearsalFailure as exc:
        print(summary(steps) if steps else "", file=sys.stderr)
        print(f"error: the rehearsal failed: {exc}", file=sys.stderr)
        sys.exit(2)
    print("\n" + summary(steps))
    print(f"\nthe rehearsal passed in {time.perf_counter() - started:.0f} s: {passed}")


def summary(steps: list[Step]) -> str:
    lines = ["| step | wall time (s) | peak memory (GiB, process tree) |", "|---|---:|---:|"]
    lines += [f"| {s.name} | {s.seconds:.0f} | {s.peak:.2f} |" for s in steps]
    return "\n".join(lines)


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--documents", type=whole(1), default=3, help="long documents (default 3)")
    parser.add_argument("--work", default=str(ROOT / "artifacts/rehearsal"), help="its files (replaced)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a stage 1 override")
    parser.add_argument("--skip-config-check", action="store_true", help="run stage 1 before any check")
    args = parser.parse_args()
    steps: list[Step] = []
    run_rehearsal(
        lambda: rehearse(Path(args.work), args.documents, args.set, steps, not args.skip_config_check),
        steps,
        f"every path of the paper's run but the GPU kernels, at its lengths (work files in {args.work})",
    )


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
