"""Which LongPPL tasks lm-eval sees: one task file per key-token artifact, and a ``TaskManager`` with them.

Every artifact directory under the keytokens stage's output directory (the parent of
``default_artifact`` in ``conf/common.yaml``, ``artifacts/keytokens``) gets a task, and so does every
location passed in (a directory anywhere, or ``hf://datasets/<org>/<name>@<revision>``). A task is
named ``longppl_<artifact name>`` and tagged ``longppl`` (every artifact) and ``longppl_<corpus>``
(the artifacts of one corpus: ``longppl_govreport_sample``). Task files hold absolute paths (lm-eval
reads a task file given by path as an inline config) and pin a local artifact's fingerprint; they are
written into a directory of this process's own, removed at exit.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline.artifact.reader import locate_artifact, normalized_location, read_manifest
from pipeline.artifact.schema import MANIFEST
from pipeline.errors import PipelineError
from pipeline.files import conf_file
from pipeline.hub import HUB_DATASET_PREFIX, is_hub_dataset
from pipeline.loogle.data.questions import TASKS

TASK_PREFIX = "longppl_"
TAG = "longppl"  # --tasks longppl: every artifact's task
TASK_CLASS = "pipeline.lmeval.longppl_task.LongPPLTask"
VERSION = 1  # the tasks' version (lm-eval's `versions` in a results file)
LOOGLE_CLASS = "pipeline.lmeval.loogle_tasks.LooGLETask"
LOOGLE_TAG = "loogle"  # --tasks loogle: LooGLE's four tasks
LOOGLE_SAMPLE = ("shortdep_qa", "longdep_qa")  # the tasks of the embedded sample; the others: the Hub


def task_name(location: str) -> str:
    """``longppl_<artifact name>``: the directory's name, or the Hub dataset's name."""
    if is_hub_dataset(location):
        name = location.removeprefix(HUB_DATASET_PREFIX).partition("@")[0].rstrip("/").rpartition("/")[2]
    else:
        name = location.rstrip("/").replace("\\", "/").rpartition("/")[2]
    return TASK_PREFIX + name


def artifacts_root() -> Path:
    """Where the keytokens stage writes artifacts by default: the parent of ``default_artifact``."""
    return Path(str(conf_file("common.yaml")["default_artifact"])).parent


def local_artifacts(root: Path | None = None) -> list[str]:
    """The artifact directories under ``root`` (those with a manifest: finished), sorted by name."""
    root = artifacts_root() if root is None else root
    if not root.is_dir():
        return []
    return sorted(str(p.absolute()) for p in root.iterdir() if (p / MANIFEST).is_file())


def task_config(location: str) -> tuple[str, dict[str, Any]]:
    """A task's name and config for an artifact location (made absolute); a local artifact whose
    manifest reads is pinned to its fingerprint and tagged with its corpus."""
    location = normalized_location(location)
    metadata: dict[str, Any] = {"version": VERSION, "longppl_artifact": location}
    tags = [TAG]
    if not is_hub_dataset(location):
        try:
            manifest = read_manifest(Path(location))
        except PipelineError:
            manifest = None  # the task's own load says what is wrong, if the task is asked for
        if manifest is not None:
            metadata["longppl_fingerprint"] = manifest["fingerprint"]
            corpus = (manifest["settings"].get("corpus") or {}).get("name")
            tags += [TASK_PREFIX + corpus] if isinstance(corpus, str) and corpus else []
    return task_name(location), {"tag": tags, "metadata": metadata}


def task_yaml(name: str, config: dict[str, Any]) -> str:
    """A task file: JSON scalars are YAML scalars; ``class`` needs lm-eval's ``!function`` tag."""
    lines = [f"task: {json.dumps(name)}", f"class: !function {TASK_CLASS}"]
    lines += [f"{key}: {json.dumps(value)}" for key, value in config.items()]
    return "\n".join(lines) + "\n"


def write_tasks(locations: Sequence[str], directory: Path) -> dict[str, Path]:
    """One task file per artifact location in ``directory``; {task name: file}. Two artifacts with one
    name, or a corpus tag that is also a task's name, are an error."""
    configs: dict[str, dict[str, Any]] = {}
    for location in dict.fromkeys(normalized_location(str(x)) for x in locations):
        name, config = task_config(location)
        if name in configs:
            first = configs[name]["metadata"]["longppl_artifact"]
            raise PipelineError(
                f"two key-token artifacts would both be task {name} ({first} and {location}): rename one "
                "of the directories"
            )
        configs[name] = config
    for config in configs.values():  # a tag may not shadow a task
        config["tag"] = [t for t in config["tag"] if t not in configs]
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, config in configs.items():
        paths[name] = directory / f"{name}.yaml"
        paths[name].write_text(task_yaml(name, config), encoding="utf-8")
    return paths


def check_artifacts(artifacts: Sequence[str | Path]) -> None:
    """Artifacts named by the user must be there: a missing directory or manifest, or a Hub dataset
    that does not download (offline), is an error at once (a Hub dataset is downloaded once, here)."""
    for location in map(str, artifacts):
        path, _ = locate_artifact(normalized_location(location))
        read_manifest(path)


def task_directory(artifacts: Sequence[str | Path] = (), root: Path | None = None) -> Path:
    """A directory of this process's own (removed at exit) with the task files of the artifacts under
    ``root`` (default: ``artifacts_root()``) and of ``artifacts`` (``check_artifacts``)."""
    check_artifacts(artifacts)
    directory = Path(tempfile.mkdtemp(prefix="longppl-lmeval-tasks-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    write_tasks([*local_artifacts(root), *map(str, artifacts)], directory)
    write_loogle_tasks(directory)
    return directory


def write_loogle_tasks(directory: Path) -> dict[str, Path]:
    """LooGLE's four tasks (``pipeline.lmeval.loogle_tasks``), tagged ``loogle``: the embedded sample's two,
    the Hub dataset's (at ``conf/loogle_data.yaml``'s revision) other two."""
    revision = conf_file("loogle_data.yaml")["revision"]
    paths = {}
    for task in TASKS:
        data = "sample" if task in LOOGLE_SAMPLE else "hub"
        meta = {"version": VERSION, "loogle_task": task, "loogle_data": data, "loogle_revision": revision}
        text = [f"task: loogle_{task}", f"class: !function {LOOGLE_CLASS}", f"tag: [{LOOGLE_TAG}]"]
        paths[task] = directory / f"loogle_{task}.yaml"
        paths[task].write_text("\n".join([*text, f"metadata: {json.dumps(meta)}"]) + "\n", encoding="utf-8")
    return paths
