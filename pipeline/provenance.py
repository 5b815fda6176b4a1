"""Hashes and version records that tie every number to the exact inputs that produced it."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

TRACKED_LIBRARIES = (
    "longppl-pipeline",
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "gguf",
    "numpy",
    "pyarrow",
    "polars",
    "datasets",
    "huggingface_hub",
    "hydra-core",
    "scipy",
)


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_sha256(path: str | Path, block: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def tree_sha256(path: str | Path) -> str:
    """sha256 of a file, or of a directory's files: each relative path and its sha256, sorted (the
    identity of a local copy of a dataset or tokenizer)."""
    path = Path(path)
    if path.is_file():
        return file_sha256(path)
    files = sorted(p for p in path.rglob("*") if p.is_file())
    return json_sha256([[p.relative_to(path).as_posix(), file_sha256(p)] for p in files])


def json_sha256(value: Any) -> str:
    """sha256 of a value's canonical JSON (sorted keys, no whitespace)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in TRACKED_LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def machine() -> str:
    """The machine and software a measurement ran on, in one line (for reports)."""
    import psutil
    import torch
    import transformers

    return (
        f"{_cpu_name()}, {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB; "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}, torch "
        f"{torch.__version__} ({torch.get_num_threads()} threads), transformers {transformers.__version__}"
    )


CODE_ROOT = Path(__file__).resolve().parents[1]


def run_stamp(root: Path = CODE_ROOT) -> str:
    """The code's commit and today's UTC date, in one line (for reports): ``commit 1a2b3c4, 2026-11-26``;
    ``with uncommitted changes`` when ``pipeline/`` or ``conf/`` differ from that commit."""
    date = datetime.now(timezone.utc).date().isoformat()

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)

    try:
        head = git("rev-parse", "--short", "HEAD")
        if head.returncode != 0:
            return f"commit unknown (not a git checkout), {date}"
        dirty = git("diff", "--quiet", "HEAD", "--", "pipeline", "conf").returncode != 0
    except OSError:
        return f"commit unknown (no git), {date}"
    return f"commit {head.stdout.strip()}{' with uncommitted changes' if dirty else ''}, {date}"


def _cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()
