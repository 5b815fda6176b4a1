"""Sharing key-token artifacts as Hugging Face Hub datasets (`make publish`).

The uploaded folder is the artifact itself (its Parquet tables and manifest, unchanged, so the
hashes still verify) plus a dataset card whose YAML front matter declares one config per table:
``datasets.load_dataset(<repo or folder>, "tokens")`` works, and stage 2 scores from it with
``ARTIFACT=hf://datasets/<org>/<name>``.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic.dataclasses
import yaml

from pipeline.artifact.reader import load_artifact
from pipeline.artifact.schema import MANIFEST, KeyTokenArtifact, artifact_kind, table_names
from pipeline.artifact.shards import (
    SHARDING,
    artifact_files,
    recorded_rows,
    shard_count,
    shard_name,
    shard_pattern,
    table_files,
)
from pipeline.errors import PipelineError
from pipeline.files import write_bytes_atomic
from pipeline.marks import marked_folder
from pipeline.outputs import FolderKind, Output, check, make_folder
from pipeline.reporting.common import md_code
from pipeline.settings import Text

CARD = "README.md"  # the dataset card
# Written first into every folder `make publish` makes; a folder without it is never written into.
MARKER = ".longppl-publish"
CITATION = """@inproceedings{fang2025wrong,
  title     = {What is Wrong with Perplexity for Long-context Language Modeling?},
  author    = {Lizhe Fang and Yifei Wang and Zhaoyang Liu and Chenheng Zhang and Stefanie Jegelka
               and Jinyang Gao and Bolin Ding and Yisen Wang},
  booktitle = {International Conference on Learning Representations (ICLR)},
  year      = {2025}
}"""


def front_matter(artifact: KeyTokenArtifact, license_id: str) -> dict[str, Any]:
    """The card's YAML metadata: license, one ``datasets`` config per table, the key-token settings,
    the artifact's fingerprint, contents hash (its exact bytes) and discrete hash (the same artifact,
    regenerated on any machine)."""
    manifest = artifact.manifest
    s = manifest["settings"]
    evaluator = s["evaluator"]
    keys = ("K", "d", "alpha", "beta", "gamma", "max_tokens", "min_tokens", "dtype")
    params = {k: s[k] for k in keys if k in s}
    return {
        "license": license_id,
        "tags": ["longppl", "long-context", "perplexity", "key-tokens"],
        "configs": [
            {
                "config_name": name,
                "data_files": data_files(manifest, name),
                **({"default": True} if name == "spans" else {}),
            }
            for name in table_names(manifest)
        ],
        "longppl": {
            "schema_version": manifest["schema_version"],
            "fingerprint": manifest["fingerprint"],
            "contents": artifact.contents,
            "discrete": artifact.identity.discrete,
            "evaluator": evaluator["spec"],
            "kind": artifact_kind(manifest),
            "evaluator_revision": evaluator.get("revision") or evaluator.get("file_sha256"),
            **params,
            **({"shards": shard_count(manifest)} if shard_count(manifest) else {}),
        },
    }


def data_files(manifest: dict[str, Any], table: str) -> str:
    """A config's ``data_files``: the table's one file, or the glob of its shards (as ``datasets`` names
    a split's: ``tokens-*-of-00004.parquet``)."""
    files = table_files(manifest, table)
    return files[0] if len(files) == 1 else shard_pattern(table, len(files))


def dataset_card(artifact: KeyTokenArtifact, repo: str, license_id: str) -> str:
    """README.md for the Hub: YAML front matter (written by PyYAML), then prose; every value from the
    manifest in a code span (the manifest is the artifact's, not ours: no Markdown or HTML of it)."""
    manifest = artifact.manifest
    s = manifest["settings"]
    evaluator = s["evaluator"]
    n_docs = recorded_rows(manifest, "documents")
    tables = table_names(manifest)
    front = yaml.safe_dump(front_matter(artifact, license_id), sort_keys=False, allow_unicode=True)
    definition = md_code(", ".join(f"{k}={s[k]}" for k in ("K", "d", "alpha", "beta", "gamma")))
    notes = shard_list(manifest, tables) + origin(manifest)
    body = f"""
# Key tokens for LongPPL: {repo}

Key tokens of {n_docs} documents of the corpus {md_code(s["corpus"]["name"])}, found by the evaluator
{md_code(evaluator["spec"])} with the method of Fang et al. (ICLR 2025): a token is key when its
long-short difference LSD = log P(x | full context) - log P(x | last K tokens) exceeds alpha and
its long-context log-prob exceeds beta ({definition}). Spans are character offsets into the stored
texts, so any model, with any tokenizer, can be scored against them.

{table_rows(manifest, tables)}
{notes}`manifest.json` records every setting, library versions and the sha256 of each file.
Fingerprint {md_code(manifest["fingerprint"])}, contents {md_code(artifact.contents)}: a download must
match both (the exact bytes). Discrete hash {md_code(artifact.identity.discrete)}: the texts, tokens and
key spans, which `make keytokens` with these settings reproduces on any machine, with per-token values
within a measured tolerance (results record the artifact's identity; `make compare-artifacts` compares
two).

Score a model against it with the LongPPL pipeline:

```sh
make score MODEL=<model> ARTIFACT=hf://datasets/{repo}
```

## Citation

```bibtex
{CITATION}
```
"""
    return f"---\n{front}---\n{body}"


def check_card(card: str, artifact: KeyTokenArtifact, license_id: str) -> None:
    """Parse the card back as the Hub does (``huggingface_hub.DatasetCard``): its metadata must be
    exactly the front matter written."""
    from huggingface_hub import DatasetCard

    try:
        parsed = DatasetCard(card).data.to_dict()
    except Exception as exc:  # the Hub's parser raises several types for a bad card
        raise PipelineError(f"the dataset card does not parse ({exc}): nothing was uploaded") from None
    if parsed != front_matter(artifact, license_id):
        raise PipelineError("the dataset card's metadata does not read back as written: nothing was uploaded")


def check_repo(repo: str) -> None:
    """A Hub dataset id, ``<org>/<name>`` (``huggingface_hub``'s own rule)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        if repo.count("/") != 1:
            raise HFValidationError("give <org>/<name>")
        validate_repo_id(repo)
    except HFValidationError as exc:
        detail = str(exc).splitlines()[0][:160]
        raise PipelineError(
            f"REPO={repo!r} is not a Hub dataset id ({detail}): set REPO=<org>/<name>"
        ) from None


TABLE_TEXT = {
    "documents": "the exact texts scored, their sha256, evaluator token counts, truncation flags",
    "tokens": "per evaluator token: character span, long and short log-prob, LSD, weight, is_key",
    "spans": "merged key-token character intervals",
    "questions": "each document's questions and answers (LooGLE's), with their task, id and type",
    "evidence": "each question's evidence located as character spans, the rule used, or unlocated",
}


def table_rows(manifest: dict[str, Any], tables: tuple[str, ...]) -> str:
    rows = [f"| `{t}` | {recorded_rows(manifest, t)} | {TABLE_TEXT[t]} |" for t in tables]
    return "\n".join(["| config | rows | what |", "|---|---:|---|", *rows]) + "\n"


def shard_list(manifest: dict[str, Any], tables: tuple[str, ...]) -> str:
    """For a sharded artifact, every shard with its documents and rows (shard ``i`` of each table holds
    the same whole documents); nothing for one file per table."""
    count = shard_count(manifest)
    if count is None:
        return ""
    documents, files = manifest[SHARDING]["documents"], manifest["files"]
    head = ["| file | documents | rows |", "|---|---:|---:|"]
    names = [(shard_name(t, i, count), i) for t in tables for i in range(count)]
    rows = [f"| `{name}` | {documents[i]} | {files[name]['rows']} |" for name, i in names]
    return (
        f"The tables are in {count} shards each, named as Hub datasets name theirs "
        f"(`{shard_name('tokens', 0, count)}`), cut at document boundaries: shard `i` of every table "
        "holds the same whole documents. `manifest.json` records each shard's sha256, and a reader that "
        "finds one missing, extra or of another artifact refuses it.\n\n" + "\n".join([*head, *rows]) + "\n\n"
    )


def origin(manifest: dict[str, Any]) -> str:
    """Where imported key spans come from (a key_spans artifact), as a paragraph; else nothing."""
    source = manifest["settings"].get("source")
    if not source:
        return ""
    folder = f"{source.get('folder')}/{source.get('evaluator_folder', '')}"
    return (
        "The key spans were computed by the LongPPL authors and published in "
        f"{md_code(source.get('repository'))} (commit {md_code(source.get('commit'))}, folder "
        f"{md_code(folder)}, {md_code(source.get('license', 'see that repository'))}); this dataset has "
        "no per-token values, so it gives PPL and LongPPL but not LongPPL-soft.\n\n"
    )


def prepare_folder(artifact_dir: str | Path, out_dir: str | Path, repo: str, license_id: str) -> Path:
    """Write the exact folder that would be uploaded: the verified artifact files and the card, into a
    folder this command makes (``own_folder``)."""
    check_repo(repo)
    artifact = load_artifact(artifact_dir)
    out = Path(out_dir)
    names = [*artifact_files(artifact.manifest, table_names(artifact.manifest)), MANIFEST, CARD]
    folder = own_folder(out, artifact.root, names)
    for name in names[:-1]:
        (folder / name).unlink(missing_ok=True)
        shutil.copy2(artifact.root / name, folder / name)
    card = dataset_card(artifact, repo, license_id)
    check_card(card, artifact, license_id)
    write_bytes_atomic(folder / CARD, card.encode())
    load_artifact(out)  # the copy verifies like the original
    return out


def own_folder(out: Path, source: Path, names: list[str]) -> Path:
    """Make ``out`` (with ``MARKER``), or check that an earlier run made it (a failed upload's folder is
    prepared anew): a folder this command did not make (an artifact, any other, even an empty one),
    the artifact itself, or one with files it did not write is never written into (``pipeline.outputs``);
    the folder, where it leads."""
    if out.exists() and out.resolve() == source.resolve():
        raise PipelineError(f"out_dir={out} is the artifact being published: choose a new out_dir")
    if source.resolve() in out.resolve().parents:
        raise PipelineError(f"out_dir={out} is inside the artifact being published: choose a new out_dir")
    return make_folder(check(Output("out_dir", out, publish_folder(names))))


def publish_folder(names: list[str]) -> FolderKind:
    """A folder `make publish` made (``MARKER``; an empty one is not), holding only ``names``: a copy of
    an artifact, so an artifact's folder as far as its files go."""
    marked = marked_folder("publish", MARKER, empty=False)

    def mine(folder: Path) -> str | None:
        if why := marked.mine(folder):
            return why
        others = sorted(p.name for p in folder.iterdir() if p.name not in [*names, MARKER])
        listed = ", ".join(others[:3])
        return f"a folder that holds files that `make publish` did not write ({listed})" if others else None

    return dataclasses.replace(marked, mine=mine, is_artifact=True)


def upload(folder: Path, repo: str, private: bool) -> str:
    """Create the dataset repository if needed and upload the folder; returns the commit URL."""
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        api.create_repo(repo, repo_type="dataset", private=private, exist_ok=True)
        info = api.upload_folder(
            folder_path=str(folder),
            repo_id=repo,
            repo_type="dataset",
            commit_message="LongPPL key-token artifact",
            ignore_patterns=[MARKER],
            delete_patterns=["*.parquet"],  # an earlier upload's tables, of another layout, go
        )
    except Exception as exc:  # offline, no token, no rights: one line that says what to do
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise PipelineError(
            f"could not upload to the Hub dataset '{repo}' ({detail}): log in with `hf auth login` "
            f"on a connected machine, or upload the prepared folder {folder} yourself"
        ) from exc
    return str(getattr(info, "commit_url", info))


@pydantic.dataclasses.dataclass(frozen=True)
class PublishOptions:
    """`make publish`'s settings (``conf/publish.yaml``)."""

    artifact: str
    repo: Text | None = None  # <org>/<name> of the dataset repository
    dry_run: bool = False  # only write the folder that would be uploaded
    out_dir: str | None = None  # None: artifacts/publish/<org>--<name>
    license: Text = "cc-by-4.0"
    private: bool = False


@dataclass(frozen=True)
class Published:
    """The folder written, and where it went on the Hub (None: a dry run)."""

    folder: Path
    repo: str
    url: str | None


def publish(options: PublishOptions) -> Published:
    """The artifact as a Hub dataset folder (its tables unchanged, a dataset card), then uploaded."""
    if not options.repo:
        raise PipelineError("set REPO=<org>/<name> (the Hub dataset to create or update)")
    check_repo(options.repo)
    out = Path(options.out_dir or f"artifacts/publish/{options.repo.replace('/', '--')}")
    folder = prepare_folder(options.artifact, out, options.repo, options.license)
    url = None if options.dry_run else upload(folder, options.repo, options.private)
    return Published(folder, options.repo, url)
