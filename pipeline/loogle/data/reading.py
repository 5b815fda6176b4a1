"""Where LooGLE's questions come from (``data=``): ``sample`` (the embedded Wikipedia sample in
``data/loogle``), ``hub`` (the Hub dataset at its pinned revision, ``conf/loogle.yaml``), or a directory
holding ``<task>.jsonl`` or ``<task>.parquet`` files in either layout (the repository's
``LooGLE-testdata/``, or a ``hf download`` of the dataset). Each task's questions carry a fingerprint of
their contents, which a predictions file records, so that it is never scored against other questions."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError
from pipeline.loogle.data.bounds import MAX_ROWS, check_size, jsonl_rows
from pipeline.loogle.data.questions import SAMPLE_DIR, TASKS, Question, check_task, questions_from_rows

# The Hub configs a task may have: later revisions name the summaries' config `summarization`.
CONFIG_NAMES = {"longdep_summarization": ("longdep_summarization", "summarization")}


@dataclass(frozen=True)
class DataSource:
    """``data``: sample, hub or a directory; ``dataset`` and ``revision``: the Hub dataset (hub only);
    ``option``: the setting that takes a local copy instead (named by the error when the Hub fails)."""

    data: str = "sample"
    dataset: str = "bigainlco/LooGLE"
    revision: str | None = None
    option: str = "data"

    @property
    def label(self) -> str:
        if self.data == "hub":
            return f"{self.dataset}@{(self.revision or '?')[:12]}"
        return "sample" if self.data == "sample" else Path(self.data).name


def load_questions(task: str, source: DataSource) -> list[Question]:
    """The task's questions, in the data's order."""
    check_task(task)
    if source.data == "hub":
        return questions_from_rows(task, hub_rows(task, source), f"{source.dataset} ({task})")
    folder = data_folder(source)
    path = task_file(task, folder)
    if path is None and source.data == "sample":
        raise PipelineError(
            f"the embedded LooGLE sample has no {task}: its texts' licenses do not allow shipping them "
            "(data/loogle/README.md); pass data=hub, or data=<folder with LooGLE's test files>"
        )
    if path is None:
        raise PipelineError(
            f"{folder} has no {task}.jsonl, {task}.parquet or {task}/ with Parquet files (nor its data/)"
        )
    return questions_from_rows(task, file_rows(path), str(path))


def data_folder(source: DataSource) -> Path:
    """The folder of a local source (the sample's, or ``data=<folder>``), checked to be one."""
    folder = SAMPLE_DIR if source.data == "sample" else Path(source.data)
    if not folder.is_dir():
        raise PipelineError(
            f"setting data={source.data}: not a directory (sample, hub or a folder of <task>.jsonl)"
        )
    return folder


def task_file(task: str, folder: Path) -> Path | None:
    """Where ``folder`` (or its ``data/``, a Hub download) holds the task: ``<task>.jsonl``,
    ``<task>.parquet`` or ``<task>/`` with Parquet files (the summaries' also as ``summarization``)."""
    names = CONFIG_NAMES.get(task, (task,))
    candidates = [
        b / f"{n}{ext}"
        for n in names
        for b in (folder, folder / "data")
        for ext in (".jsonl", ".parquet", "")
    ]
    return next((p for p in candidates if found(p)), None)


def tasks_held(source: DataSource) -> tuple[str, ...]:
    """The tasks the data has, in LooGLE's order: all four on the Hub, each one a folder holds (at
    least one, else one line naming the folder and the files it could hold)."""
    if source.data == "hub":
        return TASKS
    folder = data_folder(source)
    tasks = tuple(task for task in TASKS if task_file(task, folder) is not None)
    if not tasks:
        raise PipelineError(
            f"setting data={source.data}: {folder} holds none of LooGLE's tasks ({', '.join(TASKS)}): "
            "no <task>.jsonl, <task>.parquet or <task>/ with Parquet files (nor in its data/)"
        )
    return tasks


def found(path: Path) -> bool:
    """Whether a data file is at ``path``: anything but a folder (a FIFO or a device too, which the
    reader then refuses), or a folder of Parquet parts."""
    return (
        path.is_dir() and any(path.rglob("*.parquet"))
        if path.is_dir()
        else path.exists() or path.is_symlink()
    )


def file_rows(path: Path) -> list[Any]:
    """The rows of a JSONL file, a Parquet file, or a folder of Parquet files (a Hub download), each file
    within ``MAX_DATA_BYTES`` and the rows within ``MAX_ROWS``."""
    if path.is_dir():
        rows = [row for part in sorted(path.rglob("*.parquet")) for row in parquet_rows(part)]
        if len(rows) > MAX_ROWS:
            raise PipelineError(f"{path}: more than {MAX_ROWS} rows, the limit of one task")
        return rows
    return parquet_rows(path) if path.suffix == ".parquet" else jsonl_rows(path)


def parquet_rows(path: Path) -> list[Any]:
    """A Parquet file's rows; a file that is not Parquet (or too large) is one line naming it."""
    import pyarrow
    import pyarrow.parquet as pq

    check_size(path, "data file")
    try:
        table = pq.ParquetFile(path)
        if table.metadata.num_rows > MAX_ROWS:
            raise PipelineError(f"{path}: {table.metadata.num_rows} rows, over the limit of {MAX_ROWS}")
        return table.read().to_pylist()
    except (pyarrow.ArrowException, OSError) as exc:
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise PipelineError(f"{path}: not a Parquet file this reads ({detail})") from None


def hub_rows(task: str, source: DataSource) -> list[dict[str, Any]]:
    """The task's test split of the Hub dataset at its pinned revision; offline or unreachable, one line
    naming the dataset and the fix."""
    import datasets

    if not source.revision:
        key = "corpus.revision" if source.option.startswith("corpus.") else "revision"
        raise PipelineError(
            f"{source.option}=hub needs the revision of {source.dataset} to read ({key}=<commit>): "
            "unpinned, the dataset could change under the same name"
        )
    first: Exception | None = None
    for config in CONFIG_NAMES.get(task, (task,)):
        try:
            return datasets.load_dataset(
                source.dataset, config, split="test", revision=source.revision
            ).to_list()
        except Exception as exc:  # datasets raises many types for a missing or unreachable dataset
            first = first or exc
    raise hub_error(task, source, first) from first


def hub_error(task: str, source: DataSource, exc: Exception | None) -> PipelineError:
    """One line: what failed, and the fix offline."""
    detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
    lmeval = """ (lm-eval: --metadata '{"loogle_data": "DIR"}')""" if source.option == "data" else ""
    return PipelineError(
        f"could not load LooGLE's Hub dataset {source.dataset} ({task}, revision {source.revision}): "
        f"{detail}; offline, run `hf download {source.dataset} --repo-type dataset --revision "
        f"{source.revision} --local-dir DIR` on a connected machine and pass {source.option}=DIR{lmeval}"
    )


def fingerprint(questions: list[Question]) -> str:
    """A hash of the questions, their texts and answers (12 hex digits): the same on any machine."""
    digest = hashlib.sha256()
    for q in questions:
        record = [q.task, q.doc_id, q.index, q.question, q.answer]
        digest.update(json.dumps(record, sort_keys=True, ensure_ascii=False).encode())
        digest.update(hashlib.sha256(q.context.encode()).digest())
    return digest.hexdigest()[:12]
