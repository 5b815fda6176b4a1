"""out= (make show, make loogle-evidence, make loogle-keytokens) and out_dir= (make leaderboard) replace
only their command's own files, marked as its own, in a place a file may go: never an artifact's or a
model's file, a device, a FIFO, a folder, a file of procfs or a read-only place, each refused in one
line before any work. On 803d062 `show out=<artifact>/manifest.json` replaced the manifest with the
page, out= a device node (as root) replaced the node, and a folder, procfs or a read-only mount ended
in a traceback."""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

import pytest

from pipeline.commands import leaderboard as leaderboard_command
from pipeline.commands import loogle_evidence as evidence_command
from pipeline.commands import show as show_command
from pipeline.errors import PipelineError
from pipeline.files import write_bytes_atomic
from pipeline.marks import json_report, made_by, picture
from pipeline.outputs import Output, check
from pipeline.reporting import forgetting as forgetting_plot
from pipeline.reporting import keytoken_page
from pipeline.reporting.common import figure, png
from tests.support import base_rows, cli, compose_config, error_lines, write_lines

INSIDE_ARTIFACT = r"is an artifact's folder \(key-token tables and their manifest\), which `make show` never"


@pytest.fixture
def artifact(tiny_artifact, tmp_path):
    """A copy of the tiny artifact, whose files must stay as they are."""
    root = Path(shutil.copytree(tiny_artifact, tmp_path / "artifact"))
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    yield root
    assert {p: p.read_bytes() for p in before} == before, "a file of the artifact changed"


def show(artifact: Path, out: str | Path):
    return show_command.run(compose_config("show", [f"artifact={artifact}", f"out={out}"]))


@pytest.mark.parametrize("name", ["manifest.json", "tokens.parquet", "views/index.html", "new.html"])
def test_show_never_writes_into_the_artifact(artifact, name):
    with pytest.raises(PipelineError, match=rf"^out={re.escape(str(artifact / name))}: .* {INSIDE_ARTIFACT}"):
        show(artifact, artifact / name)
    assert not (artifact / "new.html").exists()


def test_show_never_replaces_a_device_a_fifo_or_a_folder(artifact, tmp_path):
    fifo, folder = tmp_path / "fifo", tmp_path / "folder"
    os.mkfifo(fifo)
    folder.mkdir()
    with pytest.raises(PipelineError, match=rf"^out={fifo} is a FIFO: pass the path of a regular file$"):
        show(artifact, fifo)
    with pytest.raises(
        PipelineError, match=rf"^out={folder} is a folder: pass a file in it, e.g. {folder}/page"
    ):
        show(artifact, folder)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and not list(folder.iterdir())
    device = tmp_path / "null"
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of its own
    except PermissionError:
        pytest.skip("making a device node needs root (CAP_MKNOD): the FIFO and the folder were checked")
    with pytest.raises(PipelineError, match=rf"^out={device} is a device: pass the path of a regular file$"):
        show(artifact, device)
    assert stat.S_ISCHR(os.lstat(device).st_mode)  # still the node, not a 17 KB page


@pytest.mark.parametrize("given", ["/proc/self/status", "/proc/self/page.html", "/sys/kernel/page.html"])
def test_show_refuses_the_kernels_files(artifact, given):
    if not Path(given).parent.is_dir():
        pytest.skip(f"{Path(given).parent} is not mounted here")
    with pytest.raises(
        PipelineError, match=rf"^out={given}: .* is in (procfs|sysfs) .*: pass a path on a disk$"
    ):
        show(artifact, given)


def test_show_refuses_a_read_only_place(artifact, tmp_path, monkeypatch):
    """A read-only mount, whoever asks (root included: its statvfs flag is what the check reads, as
    no mount can be made here); a folder without write permission, for a user other than root."""
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    real_statvfs = os.statvfs

    def statvfs(path):
        found = real_statvfs(path)
        if Path(os.path.realpath(path)) != mounted:
            return found
        return os.statvfs_result((*found[:8], found.f_flag | os.ST_RDONLY, found.f_namemax))

    monkeypatch.setattr(os, "statvfs", statvfs)
    with pytest.raises(
        PipelineError, match=rf"^out={mounted}/page.html: {mounted} is on a read-only mount: pass"
    ):
        show(artifact, mounted / "page.html")
    monkeypatch.undo()
    if os.geteuid() == 0:
        pytest.skip("root writes a folder of mode 0555: only the read-only mount is refused for root")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    with pytest.raises(PipelineError, match=rf"^out={locked}/page.html: {locked} is not writable here"):
        show(artifact, locked / "page.html")


def test_show_replaces_only_its_own_page(artifact, tmp_path):
    """A page it wrote (its generator mark) is written again, and so is an empty file; any other file,
    a page without the mark (one of 803d062 too: delete it) is refused."""
    page = tmp_path / "page.html"
    show(artifact, page)
    assert f'<meta name="generator" content="{made_by("show")}">' in page.read_text()
    show(artifact, page)
    empty = tmp_path / "empty.html"
    empty.write_text("")
    show(artifact, empty)
    notes = tmp_path / "notes.html"
    notes.write_text("<!doctype html><html><body>my notes</body></html>")
    with pytest.raises(
        PipelineError, match=r"holds no page with the mark .*: `make show` writes over its own"
    ):
        show(artifact, notes)
    assert "my notes" in notes.read_text()


def test_a_link_swapped_since_the_check_is_not_written_through(artifact, tmp_path):
    link, fresh = tmp_path / "page.html", tmp_path / "fresh.html"
    fresh.write_text("")
    link.symlink_to(fresh)
    checked = check(Output("out", link, keytoken_page.PAGES))
    link.unlink()
    link.symlink_to(artifact / "manifest.json")
    with pytest.raises(
        PipelineError, match=rf"^out={link} now leads to .*manifest.json, not to .*fresh.html"
    ):
        keytoken_page.write_page(artifact, link, None, checked)
    assert fresh.read_text() == ""


def test_an_atomic_write_never_replaces_what_is_no_regular_file(tmp_path):
    fifo, link, folder = tmp_path / "fifo", tmp_path / "link", tmp_path / "folder"
    os.mkfifo(fifo)
    link.symlink_to(tmp_path / "target")
    folder.mkdir()
    for path, what in ((fifo, "a FIFO"), (link, "a symlink"), (folder, "a folder")):
        with pytest.raises(
            PipelineError, match=rf"^{path} is {what}, not a regular file: it is not replaced"
        ):
            write_bytes_atomic(path, b"x")
    assert (
        stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.path.islink(link) and not (tmp_path / "target").exists()
    )
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary file left


def test_commands_say_one_line_for_a_folder_procfs_or_a_fifo(artifact, tmp_path):
    """Weak 4: these ended in tracebacks."""
    fifo, folder = tmp_path / "fifo", tmp_path / "folder"
    os.mkfifo(fifo)
    folder.mkdir()
    done = cli(
        "pipeline.commands.show", "--multirun", f"artifact={artifact}",
        f"out={folder},/proc/self/status,{fifo}", f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )  # fmt: skip
    assert len(error_lines(done.stderr)) == 3
    scores = write_lines(tmp_path / "scores.jsonl", base_rows())
    done = cli("pipeline.commands.leaderboard", f"results={scores}", "out_dir=/proc/self")
    assert re.fullmatch(
        r"error: out_dir=/proc/self: /proc/\d+ is in procfs \(/proc\), not a place .*", done.stderr.strip()
    )


def test_leaderboard_writes_only_into_a_folder_it_made(artifact, tmp_path):
    """A new or empty folder becomes its own (``.longppl-leaderboard``), and is written again; an
    artifact's folder, a folder of the user's files (or a leaderboard of 803d062, without the mark) is
    refused before any result is read."""
    scores = write_lines(tmp_path / "scores.jsonl", base_rows())

    def board(out: Path) -> dict:
        return leaderboard_command.run(compose_config("leaderboard", [f"results={scores}", f"out_dir={out}"]))

    mine = tmp_path / "empty"
    mine.mkdir()
    board(mine)
    assert (mine / ".longppl-leaderboard").is_file() and (mine / "leaderboard.csv").is_file()
    board(mine)
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "leaderboard.csv").write_text("mine\n")
    with pytest.raises(PipelineError, match=r"^out_dir=.*/user is a folder `make leaderboard` did not make"):
        board(tmp_path / "user")
    with pytest.raises(PipelineError, match=rf"^out_dir={artifact} is an artifact's folder"):
        board(artifact)
    assert (tmp_path / "user" / "leaderboard.csv").read_text() == "mine\n"


def test_a_json_report_and_a_picture_are_replaced_only_when_marked(artifact, tmp_path):
    """make loogle-evidence's JSON (``made_by``) before any evidence is read; the pictures of every
    command (PNG text ``Software``), of make forgetting-curve as their example."""
    report = tmp_path / "evidence.json"
    report.write_text('{"made_by": "longppl loogle-keytokens"}')  # another command's report
    with pytest.raises(
        PipelineError, match=r'holds no JSON report with "made_by": "longppl loogle-evidence"'
    ):
        evidence_command.run(compose_config("loogle_evidence", [f"out={report}"]))
    with pytest.raises(
        PipelineError, match=rf"^out={re.escape(str(artifact))}/manifest.json: .* is an artifact"
    ):
        evidence_command.run(compose_config("loogle_evidence", [f"out={artifact / 'manifest.json'}"]))
    report.write_text('{"made_by": "longppl loogle-evidence", "tasks": []}')
    assert check(Output("out", report, json_report("loogle-evidence"))).found is not None
    plot, fig = tmp_path / "curve.png", figure()
    plot.write_bytes(png(fig))  # a PNG without the mark (as every picture of 803d062)
    row = {"model_name": "m"}
    with pytest.raises(
        PipelineError, match=r"^plot_dir=.*curve.png holds no PNG with the mark Software=longppl"
    ):
        forgetting_plot.write_plot(row, plot)
    plot.write_bytes(png(fig, "forgetting-curve"))
    assert check(Output("plot_dir", plot, picture("forgetting-curve"))).found is not None
    with pytest.raises(PipelineError, match=r"holds no PNG with the mark Software=longppl ladder"):
        check(Output("plot_dir", plot, picture("ladder")))
