"""`make compare-artifacts`'s printout: each artifact's identity, the per-token differences as a table,
the key flags that differ, whether the bytes are equal and whether they are the same artifact."""

from __future__ import annotations

from typing import Any

from pipeline.artifact.comparison import Comparison
from pipeline.artifact.identity import TOLERANCE
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.artifact.shards import describe, shard_count


def identity_line(label: str, artifact: KeyTokenArtifact) -> str:
    """An artifact's identity in one line (with its questions' hash where it has questions)."""
    questions = artifact.identity.questions
    layout = f" ({describe(artifact.manifest)})" if shard_count(artifact.manifest) else ""
    return (
        f"{label}: {artifact.root}{layout}\n   fingerprint {artifact.manifest['fingerprint'][:12]}, discrete "
        f"{artifact.identity.discrete[:12]}, contents {artifact.contents[:12]}"
        + (f", questions {questions[:12]}" if questions else "")
    )


def value_table(report: dict[str, Any]) -> str:
    """The per-column differences as a Markdown table."""
    rows = ["| column | values | differing | median | p99 | p99.9 | max | tolerance |", "|---|" + "---:|" * 7]
    for name, q in report["columns"].items():
        cells = [f"{q[k]:.3g}" for k in ("median", "p99", "p999", "max")]
        rows.append(f"| {name} | {q['n']} | {q['differing']} | {' | '.join(cells)} | {TOLERANCE[name]:g} |")
    return "\n".join(rows)


def summary(comparison: Comparison) -> str:
    """What `make compare-artifacts` prints; its last line says they are the same artifact when they
    are (otherwise the command's error says what differs)."""
    out = [identity_line("a", comparison.a), identity_line("b", comparison.b)]
    report = comparison.report
    if report is not None:
        out.append(f"\nper-token |a - b| over {len(report['documents'])} documents with the same tokens:")
        out.append(value_table(report))
        flags = report["key_flags_differ"]
        out.append("key flags that differ: " + (", ".join(f"{d} ({n})" for d, n in flags.items()) or "none"))
    out.append(f"\nexact contents: {'equal' if comparison.exact else 'differ'}")
    if not comparison.problems:
        out.append(verdict(comparison))
    return "\n".join(out)


def verdict(comparison: Comparison) -> str:
    """The last line, for artifacts that are the same."""
    checked = "every value" if comparison.report is not None else "value summaries"
    return f"the same artifact: yes (fingerprint, discrete contents, {checked} within the tolerance)"
