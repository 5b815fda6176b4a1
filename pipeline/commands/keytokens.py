"""Stage 1: an evaluator's key tokens of a corpus, as an artifact with a page per document.

``longppl keytokens [key=value ...]`` (`make keytokens`; Hydra overrides of ``conf/keytokens.yaml``):
the run, its summary, and the key-token pages of every document."""

from __future__ import annotations

import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.artifact.reader import load_artifact
from pipeline.commands.shell import hydra_main, plain
from pipeline.definition import no_key_reason
from pipeline.keytokens.ranks import is_main_process
from pipeline.keytokens.run import run as run_keytokens
from pipeline.keytokens.settings import KeyTokenSettings
from pipeline.reporting.keytoken_page import write_views


def run(cfg: Any) -> dict[str, Any]:
    started = time.time()
    settings = KeyTokenSettings.from_config(plain(cfg))
    manifest = run_keytokens(settings)
    if not is_main_process():
        return manifest
    print_summary(settings.artifact_dir(), manifest, time.time() - started)
    index = write_views(settings.artifact_dir())
    print(f"key tokens  {index} (every document's page; open in a browser)")
    return manifest


def print_summary(root: Path, manifest: dict[str, Any], seconds: float) -> None:
    art = load_artifact(root)  # every check, once: later loads recall the inputs checks
    lsd = np.asarray(art.tokens["lsd"].to_numpy(zero_copy_only=False), dtype=np.float64)
    lsd = lsd[~np.isnan(lsd)]
    n_key = int(np.asarray(art.tokens["is_key"]).sum())
    q = np.quantile(lsd, [0.5, 0.9, 0.99, 0.999]) if len(lsd) else [float("nan")] * 4
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    lines = [
        f"documents   {art.documents.num_rows} scored, {len(manifest.get('skipped', []))} skipped"
        f" ({sum(art.documents['truncated'].to_pylist())} truncated)",
        f"tokens      {art.tokens.num_rows} ({len(lsd)} with a short context)",
        f"key tokens  {n_key} ({100 * n_key / max(len(lsd), 1):.2f}% of tokens with a short context)",
        f"LSD         median {q[0]:.3f}, p90 {q[1]:.3f}, p99 {q[2]:.3f}, p99.9 {q[3]:.3f}",
        f"wall time   {seconds:.0f} s (peak memory {peak_gb:.2f} GB)",
        f"output      {root}",
        f"identity    fingerprint {art.manifest['fingerprint'][:12]}, discrete {art.identity.discrete[:12]} "
        f"(the same on any machine), contents {art.contents[:12]} (these bytes)",
        f"checked     tokenizer: {art.checked['tokenizer']}; sources: {art.checked['sources']}",
    ]
    lines += [f"skipped     {skip['doc_id']}: {skip['reason']}" for skip in manifest.get("skipped", [])]
    lines += question_lines(manifest)
    if n_key == 0:
        s = manifest["settings"]
        lines.append(f"note        no key token: {no_key_reason(s['alpha'], s['beta'], lsd)}")
    print("\n".join(lines))


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


def main() -> None:
    hydra_main("keytokens", run)


if __name__ == "__main__":
    main()
