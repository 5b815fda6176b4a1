"""`make keytokens`'s summary: the documents, tokens and key tokens the run wrote, the LSD distribution,
each document's diagnostics (``pipeline.reporting.diagnostics``), time and memory, the artifact's
location and identity, what was checked, the skipped documents, what the cut kept of a LooGLE document
and its evidence, why no token is key when none is, and the pages; or, while its Slurm job array runs,
the job and what to do once it is done."""

from __future__ import annotations

from typing import Any

from pipeline.definition import no_key_reason
from pipeline.reporting.diagnostics import summary_lines


def summary(done: Any) -> str:
    """The lines for a ``pipeline.jobs.keytokens.KeyTokensRun``."""
    if done.manifest is None:
        return submitted(done)
    art, stats, manifest = done.artifact, done.statistics, done.manifest
    q = list(stats["lsd_quantiles"].values())
    n_key, short = stats["key_tokens"], stats["with_short_context"]
    lines = [
        f"documents   {stats['documents']} scored, {len(manifest.get('skipped', []))} skipped"
        f" ({stats['truncated']} truncated)",
        f"tokens      {stats['tokens']} ({short} with a short context)",
        f"key tokens  {n_key} ({100 * n_key / max(short, 1):.2f}% of tokens with a short context)",
        f"LSD         median {q[0]:.3f}, p90 {q[1]:.3f}, p99 {q[2]:.3f}, p99.9 {q[3]:.3f}",
        *summary_lines(stats["columns"]),
        f"wall time   {done.seconds:.0f} s (peak memory {done.peak_gb:.2f} GB)",
        f"output      {done.root}",
        f"identity    fingerprint {art.manifest['fingerprint'][:12]}, discrete {art.identity.discrete[:12]} "
        f"(the same on any machine), contents {art.contents[:12]} (these bytes)",
        f"checked     tokenizer: {art.checked['tokenizer']}; sources: {art.checked['sources']}",
    ]
    lines += [f"skipped     {skip['doc_id']}: {skip['reason']}" for skip in manifest.get("skipped", [])]
    lines += question_lines(manifest)
    if n_key == 0:
        s = manifest["settings"]
        lines.append(f"note        no key token: {no_key_reason(s['alpha'], s['beta'], stats['lsd'])}")
    lines.append(f"key tokens  {done.views} (every document's page; open in a browser)")
    return "\n".join(lines)


def question_lines(manifest: dict[str, Any]) -> list[str]:
    """For an artifact with questions (LooGLE's), what the cut keeps of each document and of its
    located evidence."""
    out = []
    for doc in (manifest.get("questions") or {}).get("documents", []):
        share = doc["n_tokens"] / max(doc["n_source_tokens"], 1)
        out.append(
            f"questions   {doc['doc_id']}: {doc['n_questions']} questions; kept {doc['n_tokens']} of "
            f"{doc['n_source_tokens']} evaluator tokens ({share:.1%}); "
            f"evidence: {doc['n_evidence']} strings, "
            f"{doc['located']} located, {doc['inside_kept']} inside the kept text"
        )
    return out


def submitted(done: Any) -> str:
    """A Slurm job array submitted: its job, its tasks, where its logs go, and what writes the artifact."""
    return "\n".join(
        [
            f"submitted   Slurm job {done.submitted}: {done.pending} task(s) of stage 1",
            f"logs        {done.root / '.datatrove' / 'slurm_logs'} and {done.root / '.datatrove' / 'logs'}",
            f"then        once the job is done (squeue -j {done.submitted}), run the same command again: it "
            f"writes {done.root} (and submits again any task that failed)",
        ]
    )
