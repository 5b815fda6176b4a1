"""Publishing: the dry-run folder loads with `datasets` through its card and scores like the original;
publish never writes into a folder it did not make, and a failed upload can be tried again."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from pipeline.artifact.reader import load_artifact
from pipeline.commands import publish as publish_command
from pipeline.errors import PipelineError
from pipeline.sharing import hub_dataset as publish
from tests.support import compose_config, score


def test_dry_run_folder_loads_and_scores(tiny_artifact, other_model_dir, tmp_path):
    import datasets

    cfg = compose_config(
        "publish",
        [
            f"artifact={tiny_artifact}",
            "repo=org/keytokens",
            "dry_run=true",
            f"out_dir={tmp_path / 'folder'}",
        ],
    )
    folder = publish_command.run(cfg)
    card = (folder / "README.md").read_text()
    assert (
        card.startswith("---\nlicense: cc-by-4.0")
        and "config_name: tokens" in card
        and "@inproceedings" in card
    )
    tokens = datasets.load_dataset(str(folder), "tokens", split="train")
    docs = datasets.load_dataset(str(folder), "documents", split="train")
    assert tokens.num_rows == sum(docs["n_tokens"]) and "lsd" in tokens.column_names
    assert datasets.load_dataset(str(folder), split="train").column_names[:2] == ["doc_id", "span_index"]
    original = score(other_model_dir, tiny_artifact, tmp_path)
    published = score(other_model_dir, folder, tmp_path)
    assert published["corpus"] == original["corpus"]
    assert publish_command.run(cfg) == folder  # a rerun (after a failed upload) prepares the folder anew
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(PipelineError, match=r"holds files that `make publish` did not write \(notes\.txt\)"):
        publish_command.run(cfg)


def test_upload_failure_is_one_line(tiny_artifact, tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    cfg = compose_config(
        "publish", [f"artifact={tiny_artifact}", "repo=org/keytokens", f"out_dir={tmp_path / 'up'}"]
    )
    with pytest.raises(PipelineError, match="could not upload to the Hub dataset 'org/keytokens'"):
        publish_command.run(cfg)


@pytest.mark.parametrize("license_id", ["a: b #c", "cc-by-4.0\nprivate: true", "it's `odd`"])
def test_card_front_matter_reads_back_as_written(tiny_artifact, tmp_path, license_id):
    from huggingface_hub import DatasetCard

    folder = publish.prepare_folder(tiny_artifact, tmp_path / "card", "org/keytokens", license_id)
    data = DatasetCard((folder / "README.md").read_text()).data.to_dict()
    assert data["license"] == license_id and "private" not in data
    assert [c["config_name"] for c in data["configs"]] == ["documents", "tokens", "spans"]


@pytest.mark.parametrize("repo", ["org/na`me", "org/a b", "org", "org/x/y", "../x"])
def test_repo_must_be_a_hub_dataset_id(tiny_artifact, tmp_path, repo):
    cfg = compose_config(
        "publish",
        [f"artifact={tiny_artifact}", f"repo='{repo}'", "dry_run=true", f"out_dir={tmp_path / 'x'}"],
    )
    with pytest.raises(PipelineError, match="is not a Hub dataset id"):
        publish_command.run(cfg)
    assert not (tmp_path / "x").exists()


def publish_config(artifact: Path, out: Path):
    return compose_config(
        "publish", [f"artifact={artifact}", "repo=org/keytokens", "dry_run=true", f"out_dir={out}"]
    )


def contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_publish_never_writes_into_a_folder_it_did_not_make(tiny_artifact, tmp_path):
    """out_dir= the artifact being published (on f0729ca: its documents.parquet deleted, then a
    traceback), another artifact (its tables replaced, exit 0), an empty folder of the user's: each
    refused in one line, nothing in them touched. A folder publish made is prepared anew."""
    victim = shutil.copytree(tiny_artifact, tmp_path / "victim", ignore=shutil.ignore_patterns("views"))
    other = shutil.copytree(tiny_artifact, tmp_path / "other", ignore=shutil.ignore_patterns("views"))
    (other / "manifest.json").write_text((other / "manifest.json").read_text() + " ")  # told apart
    (tmp_path / "empty").mkdir()
    before = {folder: contents(folder) for folder in (victim, other, tmp_path / "empty")}
    cases = [
        (victim, r"is the artifact being published"),
        (other, r"is a folder `make publish` did not make \(no .longppl-publish in it\)"),
        (tmp_path / "empty", r"is a folder `make publish` did not make"),
        (victim / "card", r"is inside the artifact being published"),
    ]
    for out, message in cases:
        with pytest.raises(PipelineError, match=rf"out_dir={re.escape(str(out))} {message}"):
            publish_command.run(publish_config(victim, out))
    assert {folder: contents(folder) for folder in before} == before
    made = publish_command.run(publish_config(victim, tmp_path / "made"))
    assert publish_command.run(publish_config(victim, made)) == made  # its own folder, prepared anew
    assert load_artifact(made).contents == load_artifact(victim).contents


def test_publish_again_after_a_failed_upload(tiny_artifact, tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    cfg = compose_config(
        "publish", [f"artifact={tiny_artifact}", "repo=org/keytokens", f"out_dir={tmp_path / 'up'}"]
    )
    for _ in range(2):  # the rerun prepares the folder anew and tries the upload again
        with pytest.raises(PipelineError, match="could not upload to the Hub dataset 'org/keytokens'"):
            publish_command.run(cfg)
    assert load_artifact(tmp_path / "up").contents == load_artifact(tiny_artifact).contents
