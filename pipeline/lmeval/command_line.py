"""`make lm-eval`: ``python -m pipeline.commands.lm_eval [--artifact <dir or hf://...>]... <lm-eval flags>``.

lm-eval's own command line (``lm-eval run``, ``ls``, ``validate``), its flags unchanged
(``--tasks``, ``--model_args``, ``--output_path``, ``--log_samples``, ``--limit``, ``--batch_size``,
``--use_cache``, ...), with this project's model and tasks in it, since lm-eval 0.4.13 discovers no
plugins: the model ``longppl`` is registered, and every ``TaskManager`` lm-eval makes also holds a
task per key-token artifact (``pipeline.lmeval.task_files``; a user's ``--include_path`` is kept beside
them). ``--artifact`` (repeatable, ours) adds a task for an artifact outside ``artifacts/keytokens``.

Two defaults differ from the ``lm-eval`` command, and only when the flag is absent (and no
``--config`` file is given): ``--model longppl`` (lm-eval's is ``hf``) and ``--device auto`` (a GPU
when there is one, else the CPU; lm-eval's is ``cuda:0``). A problem with the inputs (a missing or
unreadable artifact, a Hub artifact offline, an unknown task, a bad option, a LooGLE task with a
``--model`` other than ``longppl``) is one ``error:`` line with exit status 2.
"""

from __future__ import annotations

import fnmatch
import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError
from pipeline.lmeval import require_lm_eval
from pipeline.lmeval.names import TASK_FLAGS, flag_values, unknown_tasks_in
from pipeline.lmeval.task_files import check_artifacts, task_directory
from pipeline.loogle.data.questions import TASKS

ARTIFACT_FLAG = "--artifact"
SUBCOMMANDS = ("run", "ls", "validate")


def take_artifacts(args: list[str]) -> tuple[list[str], list[str]]:
    """``--artifact X`` / ``--artifact=X`` pairs taken out of ``args``: (artifacts, the rest)."""
    artifacts, rest = [], []
    items = iter(args)
    for arg in items:
        if arg == ARTIFACT_FLAG:
            value = next(items, None)
            if value is None or value.startswith("-"):
                raise PipelineError(
                    f"{ARTIFACT_FLAG} needs a value: a key-token artifact directory or hf://..."
                )
            artifacts.append(value)
        elif arg.startswith(ARTIFACT_FLAG + "="):
            artifacts.append(arg.partition("=")[2])
        else:
            rest.append(arg)
    return artifacts, rest


def has_flag(args: list[str], *names: str) -> bool:
    return any(a in names or a.split("=", 1)[0] in names for a in args)


def with_defaults(args: list[str]) -> list[str]:
    """``args`` with ``--model longppl`` and ``--device auto`` where a run gives neither (and no
    ``--config`` file does)."""
    if (args and args[0] in SUBCOMMANDS[1:]) or has_flag(args, "--config", "-C"):
        return args
    added = [] if has_flag(args, "--model", "-M") else ["--model", "longppl"]
    added += [] if has_flag(args, "--device") else ["--device", "auto"]
    if args and args[0] == "run":
        return ["run", *added, *args[1:]]
    return [*added, *args]


@contextmanager
def with_tasks(directory: Path) -> Iterator[None]:
    """Every ``TaskManager`` lm-eval makes in the block also indexes ``directory``, first (its
    ``--include_path`` comes after, so a user's task of the same name wins)."""
    import lm_eval.tasks

    base = lm_eval.tasks.TaskManager

    class WithLongPPLTasks(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, include_path: Any = None, **kwargs: Any) -> None:
            extra = [] if include_path is None else include_path
            paths = [directory, *(extra if isinstance(extra, (list, tuple)) else [extra])]
            super().__init__(*args, include_path=paths, **kwargs)

    lm_eval.tasks.TaskManager = WithLongPPLTasks
    try:
        yield
    finally:
        lm_eval.tasks.TaskManager = base


def loogle_tasks_in(values: list[str]) -> list[str]:
    """The LooGLE tasks that ``--tasks`` values name (``loogle_<task>``, the tag ``loogle``, or a glob
    pattern that matches one)."""
    names = [n.strip() for value in values for n in value.split(",")]
    ours = [f"loogle_{task}" for task in TASKS]
    return [n for n in dict.fromkeys(names) if n == "loogle" or n in ours or fnmatch.filter(ours, n)]


def config_file(args: list[str]) -> dict[str, Any]:
    """The ``--config`` file's settings, where it reads as a YAML mapping (else lm-eval says why)."""
    import yaml

    paths = flag_values(args, ("--config", "-C"))
    try:
        found = yaml.safe_load(Path(paths[-1]).read_text(encoding="utf-8")) if paths else {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return found if isinstance(found, dict) else {}


def check_loogle_model(args: list[str]) -> None:
    """LooGLE's tasks follow its protocol only with ``--model longppl``: another model with one of them
    (``--model``, or a ``--config`` file's ``model``, lm-eval's default ``hf`` there) is one line before
    lm-eval loads the model; ``tasks_need_longppl_model`` checks again before any request runs."""
    if args and args[0] in SUBCOMMANDS[1:]:  # ls and validate run no model
        return
    args = with_defaults(args)  # no --model (and no --config): longppl
    config = config_file(args)
    tasks = flag_values(args, TASK_FLAGS) or config.get("tasks") or []
    models = flag_values(args, ("--model", "-M")) or [str(config.get("model", "hf"))]
    asked = loogle_tasks_in([str(t) for t in tasks] if isinstance(tasks, list) else [str(tasks)])
    if asked and models[-1] != "longppl":
        from pipeline.lmeval.loogle_tasks import protocol_error

        raise protocol_error(asked[0], models[-1])


@contextmanager
def tasks_need_longppl_model() -> Iterator[None]:
    """In the block, lm-eval's ``evaluate`` first checks that a LongPPL task (only the answers of the
    model ``longppl`` carry the per-token log-probs it needs) and a LooGLE task (only ``longppl``
    follows LooGLE's protocol) run with the model ``longppl``: another model is an error before any
    request runs, not after all of them."""
    import lm_eval.evaluator
    from lm_eval.api.model import CachingLM

    from pipeline.lmeval.longppl_task import LongPPLTask
    from pipeline.lmeval.loogle_tasks import LooGLETask, protocol_error
    from pipeline.lmeval.model import LongPPLLM

    base = lm_eval.evaluator.evaluate

    def evaluate(lm: Any, task_dict: Any, *args: Any, **kwargs: Any) -> Any:
        model = lm.lm if isinstance(lm, CachingLM) else lm  # under --use_cache, lm-eval's CachingLM wraps it
        ours = sorted(t.config.task for t in tasks_in(task_dict) if isinstance(t, LongPPLTask))
        loogle = sorted(t.config.task for t in tasks_in(task_dict) if isinstance(t, LooGLETask))
        if ours and not isinstance(model, LongPPLLM):
            raise PipelineError(
                f"task {ours[0]} needs the per-token log-probs of --model longppl, not --model "
                f"{type(model).__name__}: run the LongPPL tasks with --model longppl (the default)"
            )
        if loogle and not isinstance(model, LongPPLLM):
            raise protocol_error(loogle[0], type(model).__name__)
        return base(lm, task_dict, *args, **kwargs)

    lm_eval.evaluator.evaluate = evaluate
    try:
        yield
    finally:
        lm_eval.evaluator.evaluate = base


def tasks_in(task_dict: Any) -> Iterator[Any]:
    """Every task of lm-eval's (nested) task dict."""
    for value in task_dict.values():
        yield from tasks_in(value) if isinstance(value, dict) else [value]


def run(args: list[str]) -> None:
    """lm-eval's command line on ``args`` (the command's arguments) with the LongPPL model and tasks."""
    artifacts, rest = take_artifacts(args)
    check_artifacts(artifacts)  # before lm-eval loads: a missing artifact fails at once
    directory = task_directory(artifacts)
    if unknown := unknown_tasks_in(rest, directory):  # before lm-eval's task index (seconds) loads
        raise PipelineError(unknown_tasks(f"Tasks not found: {', '.join(unknown)}", directory))
    require_lm_eval()
    check_loogle_model(rest)  # before lm-eval loads the model
    importlib.import_module(
        "pipeline.lmeval.longppl_task"
    )  # registers the model, the metrics, the task class
    from lm_eval.__main__ import cli_evaluate

    sys.argv = ["longppl lm-eval", *with_defaults(rest)]  # lm-eval's usage names the command
    with with_tasks(directory), tasks_need_longppl_model():
        try:
            cli_evaluate()
        except ValueError as exc:
            if str(exc).startswith("Tasks not found"):
                raise PipelineError(unknown_tasks(str(exc), directory)) from None
            raise


def unknown_tasks(message: str, directory: Path) -> str:
    names = sorted(p.stem for p in directory.glob("*.yaml"))
    ours = ", ".join(names) if names else "none: no artifact under artifacts/keytokens (make keytokens)"
    return (
        f"{message.removeprefix('Tasks not found: ')}: no such lm-eval task. LongPPL tasks here: {ours} "
        f"(and the tag longppl); `longppl lm-eval ls tasks` lists all"
    )
