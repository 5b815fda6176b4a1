"""Stage 1 after a failure: the advice to regenerate the artifact works (a cut manifest, an edited
table, a damaged run.json); a full disk keeps the finished documents and the rerun resumes to the same
artifact; a damaged part and a lock file that is a link are one line each; and the files it writes are
readable by others."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from pipeline import files
from pipeline.artifact.reader import load_artifact
from pipeline.errors import PipelineError
from tests.support import (
    ROOT,
    cell,
    cli,
    compose_keytokens,
    craft,
    error_lines,
    first_key_row,
    keytokens_overrides,
    run_keytokens,
)


def test_regenerate_advice_works_for_a_cut_manifest_and_an_edited_table(
    tiny_model_dir, tiny_artifact, tmp_path
):
    """ "regenerate the artifact with `make keytokens`": doing so computes it anew, identical; a damaged
    run.json is rewritten while no document is finished, and one error line once some are."""
    corpus = tmp_path / "corpus.jsonl"
    shutil.copy(tiny_artifact.parent / "corpus.jsonl", corpus)
    cfg = compose_keytokens(keytokens_overrides(tiny_model_dir, corpus, tmp_path / "out"))
    root = tmp_path / "out" / "test"
    genuine = load_artifact(tiny_artifact)

    def regenerated() -> bool:
        art = load_artifact(root)
        return all(getattr(art, t).equals(getattr(genuine, t)) for t in ("documents", "tokens", "spans"))

    run_keytokens(cfg)
    text = (root / "manifest.json").read_text()
    (root / "manifest.json").write_text(text[: len(text) // 2])
    with pytest.raises(
        PipelineError, match=r"manifest\.json is not valid JSON .*regenerate the artifact with `make"
    ):
        load_artifact(root)
    run_keytokens(cfg)
    assert regenerated()
    edited = craft(root, tmp_path / "edited", tokens=lambda df: cell("lsd", first_key_row(df), 99.0)(df))
    shutil.rmtree(root)
    edited.rename(root)
    run_keytokens(cfg)
    assert regenerated()
    shutil.rmtree(root)
    root.mkdir()
    (root / "run.json").write_text("{cut")
    run_keytokens(cfg)
    assert regenerated()


def test_damaged_run_json_with_finished_documents(tiny_model_dir, tiny_artifact, tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.jsonl"
    shutil.copy(tiny_artifact.parent / "corpus.jsonl", corpus)
    cfg = compose_keytokens(keytokens_overrides(tiny_model_dir, corpus, tmp_path / "out"))

    def interrupted(*args):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr("pipeline.artifact.writer.ArtifactWriter.finalize", interrupted)
        with pytest.raises(KeyboardInterrupt):
            run_keytokens(cfg)
    root = tmp_path / "out" / "test"
    (root / "run.json").write_text("[]")
    with pytest.raises(
        PipelineError, match=r"run\.json does not read \(not a JSON object\): the 3 finished documents"
    ):
        run_keytokens(cfg)


FULL_DISK = """
import errno
import runpy
import pipeline.artifact.writer as writer

real, calls = writer.write_table_atomic, []
def full(path, table):  # the second document's first table meets a full disk
    calls.append(path)
    if len(calls) > 3:
        raise OSError(errno.ENOSPC, "No space left on device")
    return real(path, table)
writer.write_table_atomic = full
runpy.run_module("pipeline.commands.keytokens", run_name="__main__")
"""


def test_keytokens_on_a_full_disk_a_damaged_part_and_a_lock_link(tiny_model_dir, tiny_artifact, tmp_path):
    """A full disk in stage 1: one error line, the finished document kept whole, and the rerun resumes
    to the same artifact. A part damaged meanwhile and a lock file that is a link: one line each."""
    corpus = tiny_artifact.parent / "corpus.jsonl"
    overrides = [
        o for o in keytokens_overrides(tiny_model_dir, corpus, "x") if not o.startswith("output_dir")
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "full"
    command = [sys.executable, "-c", FULL_DISK, *overrides, f"output_dir={out}", f"hydra.run.dir={out}-logs"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and re.fullmatch(
        r"error: could not write document 'doc-1' of \S+ \(No space left on device\): free some space, then "
        r"run `make keytokens` again: the 1 finished documents are kept and the run resumes",
        errors[0],
    )
    parts = sorted(p.name for p in (out / "test" / "parts").iterdir())
    assert parts == ["000000"] and not (out / "test" / "manifest.json").exists()
    damaged = tmp_path / "damaged"
    shutil.copytree(out, damaged)
    (damaged / "test" / "parts" / "000000" / "tokens.parquet").write_bytes(b"not parquet")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / ".test.lock").symlink_to(tmp_path / "elsewhere.txt")
    done = cli(
        "pipeline.commands.keytokens", "--multirun", *overrides, f"output_dir={damaged},{linked}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )  # fmt: skip
    lines = error_lines(done.stderr)
    assert len(lines) == 2 and not (tmp_path / "elsewhere.txt").exists()
    assert re.search(
        r"parts/000000/tokens\.parquet is not a readable Parquet file \(.*\): delete \S+/parts/000000 and "
        r"run `make keytokens` again to compute that document anew",
        next(line for line in lines if str(damaged) in line),
    )
    assert re.search(
        r"cannot take the lock \S+\.test\.lock \(.*\): it is a symbolic link, and a lock file must be a "
        r"plain file",
        next(line for line in lines if str(linked) in line),
    )
    cli(
        "pipeline.commands.keytokens",
        *overrides,
        f"output_dir={out}",
        f"hydra.run.dir={tmp_path / 'logs'}",
        check_rc=0,
    )
    resumed = load_artifact(out / "test")
    assert resumed.manifest["run"]["resumed_documents"] == 1
    assert resumed.contents == load_artifact(tiny_artifact).contents


def test_artifact_files_are_readable_by_others(tiny_model_dir, tiny_artifact, tmp_path):
    """A normal umask's modes (0644 files, 0755 folders), not mkstemp's private 0600."""
    old = os.umask(0o022)
    try:
        corpus = tmp_path / "corpus.jsonl"
        shutil.copy(tiny_artifact.parent / "corpus.jsonl", corpus)
        run_keytokens(compose_keytokens(keytokens_overrides(tiny_model_dir, corpus, tmp_path / "out")))
        files.write_bytes_atomic(tmp_path / "plain.txt", b"x")
    finally:
        os.umask(old)
    root = tmp_path / "out" / "test"
    modes = {p.name: p.stat().st_mode & 0o777 for p in [*root.iterdir(), *(root / "views").iterdir()]}
    assert (
        set(modes.values()) <= {0o644, 0o755} and modes["manifest.json"] == 0o644 and modes["views"] == 0o755
    )
    assert (tmp_path / "plain.txt").stat().st_mode & 0o777 == 0o644
