"""A results file checked against lm-eval's own results schema (``lm_eval/result_schema.py``, 0.4.13).

lm-eval ships the schema as typing declarations only (``EvalResults`` and the types it names; nothing in
lm-eval validates against them). ``schema_problems`` validates a results file with pydantic against
``EvalResults`` and reports every error except those that lm-eval's own output has for its own
``hf`` model (so a file lm-eval writes for any model passes, and anything else is reported):

- ``"<metric>_stderr,<filter>": "N/A"``: a metric without a bootstrapped standard error;
- ``configs.<task>``: the task config's nested values (dicts, lists, numbers), typed as text;
- ``config.batch_size`` as a number, ``git_hash`` null outside git, a null tokenizer token;

and one of this project's: a metric that does not exist for the task's artifact
(``configs.<task>.metadata.longppl_unavailable``, LongPPL-soft of key spans alone) is null. Besides
pydantic's checks: every top-level key is one ``EvalResults`` declares, and every ``results`` entry
has ``name``, ``alias``, ``sample_len`` and ``<metric>,<filter>`` keys.
"""

from __future__ import annotations

import re
from typing import Any

import pydantic
from lm_eval.result_schema import EvalResults, _TaskMetrics

from pipeline import metric_registry

METRIC_KEY = re.compile(r"[^,]+,[^,]+")
STDERR_KEY = re.compile(r"[^,]+_stderr,[^,]+")
TASK_FIELDS = ("name", "alias", "sample_len")


def schema_problems(data: dict[str, Any]) -> list[str]:
    """Every way ``data`` (a results file's JSON) departs from ``EvalResults`` beyond lm-eval's own
    output; empty when it conforms."""
    problems = [
        f"top-level key {k!r} is not in EvalResults" for k in data if k not in EvalResults.__annotations__
    ]
    try:
        pydantic.TypeAdapter(EvalResults).validate_python(data)
    except pydantic.ValidationError as exc:
        for error in exc.errors():
            if not tolerated(error["loc"], error.get("input"), data):
                where = ".".join(map(str, error["loc"]))
                problems.append(f"{where}: {error['msg']} (got {error.get('input')!r:.60})")
    for task, metrics in (data.get("results") or {}).items():
        missing = [k for k in TASK_FIELDS if k not in metrics]
        problems += [f"results.{task} lacks {', '.join(missing)}"] if missing else []
        problems += [
            f"results.{task}: {key!r} is not '<metric>,<filter>'"
            for key in metrics
            if key not in _TaskMetrics.__annotations__ and not METRIC_KEY.fullmatch(key)
        ]
    return sorted(set(problems))


def tolerated(loc: tuple[Any, ...], value: Any, data: dict[str, Any]) -> bool:
    """Whether a pydantic error at ``loc`` is one lm-eval's own output has (module docstring)."""
    top = loc[0]
    if top == "results" and len(loc) >= 3:
        key = str(loc[2])
        if STDERR_KEY.fullmatch(key):
            return value == "N/A"
        metadata = ((data.get("configs") or {}).get(loc[1]) or {}).get("metadata") or {}
        names = {m.lmeval_name: m.name for m in metric_registry.metrics()}  # longppl_unavailable's keys
        return value is None and names.get(key.split(",")[0]) in (metadata.get("longppl_unavailable") or {})
    if top == "configs":
        return len(loc) >= 3 and isinstance(value, (dict, list, int, float))
    if loc[:2] == ("config", "batch_size"):
        return isinstance(value, int)
    return (top == "git_hash" or str(top).startswith("tokenizer_")) and value is None
