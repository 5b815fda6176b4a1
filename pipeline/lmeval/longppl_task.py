"""The LongPPL task of one key-token artifact, for lm-evaluation-harness.

Its documents are the artifact's texts, one ``loglikelihood_rolling`` request each. With the model
``longppl`` the answer carries the model's tokens and log-probs; ``process_results`` turns them into
the document's sums with the score engine (``pipeline.score.documents.score_tokens``: the key spans
and soft weights carried onto the model's tokens, bits per byte), and the aggregations pool them as
`make score` does (``pipeline.lmeval.metrics``). Metrics: every metric of the registry
(``pipeline.metric_registry``), by its lm-eval name.

Configured by ``metadata.longppl_artifact`` (a directory or ``hf://datasets/<org>/<name>@<rev>``) and,
optionally, ``metadata.longppl_fingerprint`` (the artifact must have it). The task writes what it
scored against into its config's metadata, which lm-eval copies into the results file
(``configs.<task>.metadata``): ``longppl_fingerprint``, ``longppl_artifact_record`` (name,
fingerprint, source with the Hub commit, kind, evaluator, K, d, alpha, beta) and
``longppl_unavailable`` (why a null metric is null: LongPPL-soft of a ``key_spans`` artifact).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import datasets
from lm_eval.api.task import ConfigurableTask
from lm_eval.tasks import TaskManager

from pipeline.artifact.reader import iter_documents, open_artifact
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.lmeval.metrics import document_items, metric_list
from pipeline.lmeval.model import MODEL_NAME
from pipeline.lmeval.task_files import VERSION, task_directory, task_name
from pipeline.results.score import artifact_record
from pipeline.score.documents import score_tokens
from pipeline.score.engine import unavailable_metrics
from pipeline.settings import ScoreSettings

# The sums of a document need no (alpha, beta) grid: that stays `make score`'s.
SUMS = ScoreSettings(grid=())


class LongPPLTask(ConfigurableTask):
    """One key-token artifact as an lm-eval task (module docstring); ``config`` as lm-eval passes it
    (a YAML file's or an inline dict's contents, ``class`` included)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        cfg = copy.deepcopy(config or {})
        cfg.pop("class", None)  # lm-eval passes it along; TaskConfig takes no such field
        meta = cfg.setdefault("metadata", {})
        location = meta.get("longppl_artifact")
        if not location:
            raise PipelineError(
                f"task {cfg.get('task', '?')}: set metadata.longppl_artifact to a key-token artifact "
                "(a directory or hf://datasets/<org>/<name>@<revision>)"
            )
        self.artifact = open_artifact(str(location))
        check_fingerprint(self.artifact, meta.get("longppl_fingerprint"), str(location))
        self.documents = {doc.doc_id: doc for doc in iter_documents(self.artifact)}
        meta.update(
            version=meta.get("version", VERSION),
            longppl_fingerprint=self.artifact.manifest["fingerprint"],
            longppl_artifact_record=artifact_record(self.artifact),
            longppl_unavailable=unavailable_metrics(self.artifact, grid=False),
        )
        cfg.setdefault("task", task_name(str(location)))
        for key, value in task_defaults().items():
            cfg.setdefault(key, value)
        super().__init__(config=cfg)

    def download(self, *args: Any, **kwargs: Any) -> None:
        """The artifact's documents (no dataset to download): ``doc_id`` and ``text``, in order."""
        texts = self.artifact.texts()
        test = datasets.Dataset.from_dict({"doc_id": list(texts), "text": list(texts.values())})
        self.dataset = datasets.DatasetDict({"test": test})

    def build_all_requests(self, **options: Any) -> None:
        """lm-eval's requests, then checked against this artifact: ``--cache_requests`` keys its cache by
        the task's name, which two artifacts of one folder name share, so cached requests may hold
        another artifact's texts; that is an error before any request runs."""
        super().build_all_requests(**options)
        for instance in self._instances or []:
            doc = instance.doc
            ours = self.documents.get(doc.get("doc_id")) if isinstance(doc, dict) else None
            if ours is None or ours.text != doc.get("text"):
                raise PipelineError(
                    f"task {self.config.task}: its requests (from lm-eval's --cache_requests cache) hold "
                    f"document {doc.get('doc_id')!r} of another artifact than {self.artifact.root} (one of "
                    "the same name?): run with --cache_requests refresh"
                )

    def process_results(self, doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        """The document's item of every metric, from the model's tokens of its text."""
        (value,) = results
        tokens = getattr(value, "tokens", None)
        if tokens is None:
            raise PipelineError(
                f"task {self.config.task} needs the per-token log-probs of --model {MODEL_NAME}; this "
                "model returned a plain log-likelihood"
            )
        score = score_tokens(self.documents[doc["doc_id"]], tokens, SUMS)
        return document_items(score, self.artifact.has_token_values)


def task_defaults() -> dict[str, Any]:
    """Everything of a LongPPL task's config but its name and artifact."""
    return {
        "output_type": "loglikelihood_rolling",
        "test_split": "test",
        "doc_to_text": "",
        "doc_to_target": "text",
        "metric_list": metric_list(),
    }


def check_fingerprint(artifact: KeyTokenArtifact, pinned: str | None, location: str) -> None:
    found = artifact.manifest["fingerprint"]
    if pinned and pinned != found:
        raise PipelineError(
            f"key-token artifact {location} has fingerprint {found[:12]}, the task pins {pinned[:12]}: "
            "the artifact changed; point the task at the artifact it was made for, or remove the pin"
        )


def task_manager(
    artifacts: Sequence[str | Path] = (),
    *,
    include_path: str | Path | Sequence[str | Path] | None = None,
    include_defaults: bool = False,
    root: Path | None = None,
    **options: Any,
) -> Any:
    """An lm-eval ``TaskManager`` with the LongPPL tasks (``pipeline.lmeval.task_files.task_directory``: the
    artifacts under ``root``, default ``artifacts/keytokens``, and ``artifacts``), the folders of
    ``include_path`` and, with ``include_defaults``, lm-eval's own tasks (wikitext, ...; indexing them
    takes seconds). ``options``: more of ``TaskManager``'s arguments (``metadata``)."""
    if include_path is None:
        include_path = []
    extra = [include_path] if isinstance(include_path, (str, Path)) else list(include_path)
    paths = [task_directory(artifacts, root), *map(Path, extra)]
    return TaskManager(include_path=paths, include_defaults=include_defaults, **options)
