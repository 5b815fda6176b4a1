"""The cost of checking an artifact's contents on every load, against a score run on the same artifact.

Times, on one artifact (default: the default artifact), reading it as before the checks (manifest,
file hashes, Parquet tables) and the content checks (``pipeline.artifact.checks``), alternately,
``--repeats`` times (medians); and reads the wall time of the newest score run on that artifact
(same fingerprint) from a results file, which ``make score`` wrote on this machine.

    make bench-checks
    .venv/bin/python -m bench.artifact_checks --results artifacts/results/scores.jsonl --repeats 20
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench.common import default_artifact
from pipeline.artifact.checks import check_artifact
from pipeline.artifact.reader import read_manifest, read_table
from pipeline.artifact.schema import KeyTokenArtifact, declared_tables
from pipeline.results.scores import read_lines


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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--artifact", default=str(default_artifact()))
    parser.add_argument("--results", default="artifacts/results/scores.jsonl")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    root = Path(args.artifact)
    read_s, check_s = [], []
    for _ in range(args.repeats):
        t = time.perf_counter()
        artifact = read_unchecked(root)
        read_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        check_artifact(artifact)
        check_s.append(time.perf_counter() - t)
    read_m, check_m = statistics.median(read_s), statistics.median(check_s)
    score = newest_score_seconds(Path(args.results), artifact.manifest["fingerprint"])
    share = (lambda s: f"{100 * s / score[0]:.3f}%") if score else (lambda s: "n/a")
    rows = artifact.tokens.num_rows if artifact.tokens is not None else 0
    print(f"artifact {root.name}: {artifact.documents.num_rows} documents, {rows} tokens")
    print(f"\n| step | seconds (median of {args.repeats}) | share of the score run |")
    print("|---|---:|---:|")
    print(f"| read: manifest, file hashes, tables | {read_m:.4f} | {share(read_m)} |")
    print(f"| content checks (artifact_checks) | {check_m:.4f} | {share(check_m)} |")
    if score:
        print(f"| the score run ({score[1]}) | {score[0]:.1f} | 100% |")
    else:
        print(f"\nno score run on this artifact in {args.results}: run `make score` first for the ratio")


if __name__ == "__main__":
    main()
