"""Publishing a sharded artifact: the folder holds every shard, the card's configs read them with
`datasets` (offline) as one table each and list them, the folder scores like the one-file form, and an
upload removes an earlier upload's tables so that no shard of another layout stays on the Hub."""

from __future__ import annotations

from pathlib import Path

from pipeline.artifact.reader import load_artifact
from pipeline.commands import publish as publish_command
from pipeline.sharing import hub_dataset as publish
from tests.support import compose_config, score


def publish_config(artifact: Path, out: Path, *extra: str):
    return compose_config("publish", [f"artifact={artifact}", "repo=org/keytokens", f"out_dir={out}", *extra])


def test_a_sharded_artifact_publishes_and_loads_with_datasets(
    sharded_artifact, tiny_artifact, other_model_dir, tmp_path, monkeypatch
):
    import datasets
    from huggingface_hub import DatasetCard

    monkeypatch.setattr("datasets.config.HF_HUB_OFFLINE", True)  # offline: the folder alone
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    folder = publish_command.run(publish_config(sharded_artifact, tmp_path / "folder", "dry_run=true"))
    shards = sorted(p.name for p in sharded_artifact.glob("*.parquet"))
    assert sorted(p.name for p in folder.glob("*.parquet")) == shards and len(shards) == 9
    card = (folder / "README.md").read_text()
    configs = DatasetCard(card).data.to_dict()["configs"]
    assert [(c["config_name"], c["data_files"]) for c in configs] == [
        (t, f"{t}-*-of-00003.parquet") for t in ("documents", "tokens", "spans")
    ]
    assert all(f"| `{name}` |" in card for name in shards)  # the card lists every shard
    whole = load_artifact(tiny_artifact)
    for table in ("documents", "tokens", "spans"):
        loaded = datasets.load_dataset(str(folder), table, split="train")
        assert loaded.data.table.cast(getattr(whole, table).schema).equals(getattr(whole, table)), table
    original = score(other_model_dir, tiny_artifact, tmp_path)
    published = score(other_model_dir, folder, tmp_path)
    assert published["corpus"] == original["corpus"]
    assert published["artifact"]["identity"] == original["artifact"]["identity"]


def test_an_upload_removes_an_earlier_uploads_tables(sharded_artifact, tmp_path, monkeypatch):
    """The upload's commit deletes the repository's `*.parquet` files it does not upload (a one-file
    form replaced by shards, or shards of another cut), which readers would refuse as extra."""
    calls = {}

    class Api:
        def create_repo(self, *args, **kwargs):
            pass

        def upload_folder(self, **kwargs):
            calls.update(kwargs)
            return "https://huggingface.co/datasets/org/keytokens/commit/x"

    monkeypatch.setattr("huggingface_hub.HfApi", Api)
    done = publish.publish(
        publish.PublishOptions(str(sharded_artifact), "org/keytokens", out_dir=str(tmp_path / "up"))
    )
    assert done.url.endswith("/commit/x")
    assert calls["delete_patterns"] == ["*.parquet"] and calls["ignore_patterns"] == [publish.MARKER]
