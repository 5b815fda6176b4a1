"""LongPPL inside lm-evaluation-harness (lm-eval 0.4.13, the optional extra ``lmeval``).

- ``LongPPLLM``: the model ``longppl`` (``pipeline.lmeval.model``): lm-eval's ``loglikelihood_rolling`` by
  the score engine, for any model `make score` loads, with its options;
- ``LongPPLTask``: the task of one key-token artifact (``pipeline.lmeval.longppl_task``), metrics those of
  the registry (``pipeline.metric_registry``) by their lm-eval names, pooled as `make score` pools them
  (``pipeline.lmeval.metrics``);
- ``task_manager``: an lm-eval ``TaskManager`` with a task per artifact (``pipeline.lmeval.task_files``);
- ``command_line``: lm-eval's command line with all of these (`make lm-eval`, ``pipeline.commands.lm_eval``);
- ``schema_problems``: a results file against lm-eval's results schema (``pipeline.lmeval.results_schema``);
- LooGLE's tasks (``pipeline.lmeval.loogle_tasks``, ``loogle_<task>``, tag ``loogle``): answered by
  `make loogle`'s generation with the model ``longppl``, scored with its metrics.

    import lm_eval
    from pipeline.lmeval import LongPPLLM, task_manager
    results = lm_eval.simple_evaluate(model=LongPPLLM("smollm2-135m"), tasks=["longppl"],
                                      task_manager=task_manager())

The names load lm-eval on first use (importing them registers the model and the metrics in lm-eval,
after lm-eval's own models); without lm-eval installed that is a PipelineError saying how to install it.

Layer: api. May import: every layer below (foundation, settings, inputs, contract, stages) and the api
layer (``api``, ``lmeval``); never a report.
"""

from __future__ import annotations

import importlib
from typing import Any

from pipeline.errors import PipelineError

INSTALL_HINT = "lm-eval is not installed: run `make setup-lmeval` (or pip install -e '.[lmeval]')"
LAZY = {
    "LongPPLLM": "pipeline.lmeval.model",
    "RollingLogLikelihood": "pipeline.lmeval.model",
    "LongPPLTask": "pipeline.lmeval.longppl_task",
    "task_directory": "pipeline.lmeval.task_files",
    "task_manager": "pipeline.lmeval.longppl_task",
    "schema_problems": "pipeline.lmeval.results_schema",
}
__all__ = sorted(LAZY)


def require_lm_eval() -> None:
    """lm-eval's own models loaded (and so installed), or a PipelineError saying how to install it."""
    try:
        importlib.import_module("lm_eval.models")
    except ImportError as exc:
        raise PipelineError(INSTALL_HINT) from exc


def __getattr__(name: str) -> Any:
    if name not in LAZY:
        raise AttributeError(f"module 'pipeline.lmeval' has no attribute {name!r}")
    require_lm_eval()
    importlib.import_module("pipeline.lmeval.longppl_task")  # the model, the metrics and the task class
    return getattr(importlib.import_module(LAZY[name]), name)
