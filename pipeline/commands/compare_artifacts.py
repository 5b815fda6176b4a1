"""Two artifacts compared: the same bytes? the same artifact? how far apart are their values?

``longppl compare-artifacts a=<dir> b=<dir>`` (`make compare-artifacts`; Hydra overrides of
``conf/compare_artifacts.yaml``). Prints each artifact's identity (fingerprint, discrete hash, exact
contents hash), the verdict (``pipeline.artifact.identity.differences``: the documents whose texts,
tokens, key spans or values differ), and a table of the per-token differences of every value column over
the documents with the same tokens (median, 99th and 99.9th percentiles, max;
``identity.compare_tables``) beside the tolerance. Where both have per-token values, every value must be
within the tolerance (summaries within their bounds are not enough). Exits with status 2 when they are
not the same artifact.
"""

from __future__ import annotations

from typing import Any

import pydantic.dataclasses

from pipeline.artifact.identity import TOLERANCE, compare_tables, differences, table_differences
from pipeline.artifact.reader import open_artifact
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.commands.shell import hydra_main, plain
from pipeline.errors import PipelineError
from pipeline.settings import Text, parse


@pydantic.dataclasses.dataclass(frozen=True)
class CompareOptions:
    a: Text
    b: Text | None = None


def identity_line(label: str, artifact: KeyTokenArtifact) -> str:
    return (
        f"{label}: {artifact.root}\n   fingerprint {artifact.manifest['fingerprint'][:12]}, discrete "
        f"{artifact.identity.discrete[:12]}, contents {artifact.contents[:12]}"
    )


def value_table(report: dict[str, Any]) -> str:
    """The per-column differences as a Markdown table."""
    rows = ["| column | values | differing | median | p99 | p99.9 | max | tolerance |", "|---|" + "---:|" * 7]
    for name, q in report["columns"].items():
        cells = [f"{q[k]:.3g}" for k in ("median", "p99", "p999", "max")]
        rows.append(f"| {name} | {q['n']} | {q['differing']} | {' | '.join(cells)} | {TOLERANCE[name]:g} |")
    return "\n".join(rows)


def run(cfg: Any) -> dict[str, Any]:
    options = parse(CompareOptions, plain(cfg))
    if options.b is None:
        raise PipelineError("give the artifact to compare with: b=<directory or hf://datasets/...>")
    a, b = open_artifact(options.a), open_artifact(options.b)
    print(identity_line("a", a))
    print(identity_line("b", b))
    problems = differences(b.identity, a.identity)
    report = compare_tables(a, b) if a.has_token_values and b.has_token_values else None
    if report is not None:
        print(f"\nper-token |a - b| over {len(report['documents'])} documents with the same tokens:")
        print(value_table(report))
        flags = report["key_flags_differ"]
        print("key flags that differ: " + (", ".join(f"{d} ({n})" for d, n in flags.items()) or "none"))
        problems += table_differences(report)  # both at hand: every value, not only its summaries
    exact = a.contents == b.contents
    print(f"\nexact contents: {'equal' if exact else 'differ'}")
    if problems:
        raise PipelineError("not the same artifact: " + "; ".join(problems))
    checked = "every value" if report is not None else "value summaries"
    print(f"the same artifact: yes (fingerprint, discrete contents, {checked} within the tolerance)")
    return {"exact": exact, "report": report}


def main() -> None:
    hydra_main("compare_artifacts", run)


if __name__ == "__main__":
    main()
