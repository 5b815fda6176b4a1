"""The cost of checking an artifact on every load, against a score run on the same artifact.

Times, on one artifact (default: the default artifact), reading it as before the checks (manifest,
file hashes, Parquet tables), the content checks (``pipeline.artifact.checks``), its contents hash
(``KeyTokenArtifact.contents``), its identity as the same artifact (``artifact_identity``) and the checks against its inputs (``pipeline.artifact.inputs``):
as the first load on a machine does them (loading the evaluator's tokenizer, re-tokenising every text,
reading the sources; ``--cold-repeats`` times) and as every later load does (recalling the completed
check: `make keytokens` completes it when it writes the artifact). Each step in its own process,
medians of ``--repeats`` runs; the wall time of the newest score run on that artifact (same
fingerprint) is read from a results file, which ``make score`` wrote on this machine.

    make bench-checks
    make bench-checks ARGS="--results artifacts/results/scores.jsonl --repeats 20"
"""

from __future__ import annotations

from pathlib import Path

from bench import runner, shared
from pipeline.artifact import inputs
from pipeline.artifact.checks import check_artifact
from pipeline.artifact.identity import artifact_identity
from pipeline.artifact.reader import read_manifest, read_table
from pipeline.artifact.schema import KeyTokenArtifact, contents_sha256, declared_tables
from pipeline.results.score import read_lines


def read_unchecked(root: Path) -> KeyTokenArtifact:
    """What loading did before the content checks: the manifest, the hashes, the tables."""
    manifest = read_manifest(root)
    tables = {name: read_table(root, name, manifest, True) for name in declared_tables(manifest, root)}
    return KeyTokenArtifact(root=root, manifest=manifest, **{"tokens": None, **tables})


def newest_score_seconds(results: Path, fingerprint: str) -> tuple[float, str] | None:
    """Wall time of the newest score run on this artifact, and which run it was."""
    if not results.is_file():
        return None
    runs = [obj for _, obj, line in read_lines(results) if line.artifact.fingerprint == fingerprint]
    if not runs:
        return None
    run = max(runs, key=lambda r: r.get("date") or "")
    return float(run["wall_seconds"]), f"{run['model_name']} on {run.get('date')}"


STEPS = (
    "read: manifest, file hashes, tables",
    "content checks (artifact.checks)",
    "contents hash (schema.contents_sha256)",
    "identity (identity.artifact_identity: discrete hash, value summaries)",
    "inputs, later loads: the recorded check",
)
FIRST_LOAD = "inputs, first load: tokenizer, re-tokenising, sources"


def setup(step: str, size: None, artifact: str) -> runner.Work:
    """One step on the artifact as read before the checks (for later loads, its check recorded first)."""
    root = Path(artifact)
    read = read_unchecked(root)
    tables = {name: getattr(read, name) for name in declared_tables(read.manifest, root)}
    if step == STEPS[4]:
        inputs.check_against_inputs(read)  # completes and records it, as `make keytokens` does
    work = (
        lambda: read_unchecked(root),
        lambda: check_artifact(read),
        lambda: contents_sha256(tables),
        lambda: artifact_identity(read),
        lambda: inputs.check_against_inputs(read),
        lambda: inputs.check_now(read),
    )
    return work[(*STEPS, FIRST_LOAD).index(step)]


CASE = runner.Case("checks", contenders=(*STEPS, FIRST_LOAD), setup=setup)


def main() -> None:
    if runner.child(CASE):
        return
    parser = shared.arguments(__doc__)
    parser.add_argument("--artifact", default=str(shared.default_artifact()))
    parser.add_argument("--results", default="artifacts/results/scores.jsonl")
    parser.add_argument("--repeats", type=shared.whole(1), default=10)
    parser.add_argument("--cold-repeats", type=shared.whole(1), default=3)
    args = parser.parse_args()
    options = {"artifact": args.artifact}
    rows = runner.run(CASE, contenders=STEPS, options=options, repeats=args.repeats, strict=True)
    rows += runner.run(CASE, contenders=[FIRST_LOAD], options=options, repeats=args.cold_repeats, strict=True)
    medians = {r["contender"]: (r["work"]["seconds"], r["work"]["cpu_s"]) for r in rows}
    print_table(Path(args.artifact), read_unchecked(Path(args.artifact)), medians, args)


def print_table(
    root: Path, artifact: KeyTokenArtifact, medians: dict[str, tuple[float, float]], args
) -> None:
    score = newest_score_seconds(Path(args.results), artifact.manifest["fingerprint"])
    share = (lambda s: f"{100 * s / score[0]:.3f}%") if score else (lambda s: "n/a")
    rows = artifact.tokens.num_rows if artifact.tokens is not None else 0
    print(f"artifact {root.name}: {artifact.documents.num_rows} documents, {rows} tokens")
    print(f"checked: {inputs.check_against_inputs(artifact)}")
    print("\n| step | wall s (median) | CPU s (median) | wall, share of the score run |")
    print("|---|---:|---:|---:|")
    for step, (wall, cpu) in medians.items():
        print(f"| {step} | {wall:.4f} | {cpu:.4f} | {share(wall)} |")
    cold = ("read", "content", "contents hash", "identity", "first load")
    warm = ("read", "content", "contents hash", "identity", "later loads")
    for label, names in (("a first load", cold), ("every later load", warm)):
        wall, cpu = (sum(v[i] for k, v in medians.items() if any(n in k for n in names)) for i in (0, 1))
        print(f"| total, {label} | {wall:.4f} | {cpu:.4f} | {share(wall)} |")
    if score:
        print(f"| the score run ({score[1]}) | {score[0]:.1f} | | 100% |")
    else:
        print(f"\nno score run on this artifact in {args.results}: run `make score` first for the ratio")


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
