"""Reproducible leaderboard refreshes (`make leaderboard-refresh`).

A refresh (a file of the group ``conf/refresh/``, chosen with ``refresh=<name>``; ``embedded`` by
default) pins the artifact (path or ``hf://datasets/...@revision``, its fingerprint, and its discrete
hash or its exact contents hash: a forged artifact with the genuine settings has others), the models
(spec and revision) and the score settings, and points at recorded results. The artifact must be *the
same artifact* as the one each recorded result was scored on (``pipeline.artifact.identity``: the
recorded line carries its discrete hashes and value summaries), so ``make keytokens`` on another
machine followed by a refresh reproduces the record; otherwise the refresh names the documents whose
key spans, tokens or values differ. Every model is scored
again by the score stage, as one Hydra multirun over the pinned models (each a ``model`` group option
written for the run), so on any launcher: one after another by default, ``launcher=joblib`` in
parallel processes, ``launcher=slurm`` as cluster jobs. Each of PPL, LongPPL and LongPPL-soft must
match its recorded value within the stated relative tolerance; otherwise the refresh fails, naming the
model and the metric; every other number the recorded result holds (counts, bits per byte, the
alpha/beta grid, each document's values) must match too. A model may instead give ``expected`` values
(e.g. a paper's table): only those metrics are compared, on the corpus values the refresh's
``aggregate`` names (``pooled``: this project's; ``official``: the per-document values combined as the
official ``perplexity.py`` does since its commit a7082c3, whose README table the official refreshes
pin; ``official_before_a7082c3``: the arithmetic mean of the code before it, that of the paper's Table
5).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic.dataclasses
import yaml
from pydantic import Field

from pipeline.artifact.identity import Identity, differences
from pipeline.artifact.reader import normalized_location, open_artifact
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.files import conf_file, locate_input, strict_json, write_bytes_atomic
from pipeline.marks import folder_for
from pipeline.metric_registry import perplexities
from pipeline.models.loading import ModelChoice
from pipeline.outputs import Output, check
from pipeline.results import score as results
from pipeline.results.keys import context_name, model_identity
from pipeline.score.sums import official_aggregate, official_aggregate_before_a7082c3
from pipeline.settings import Text, parse

# How a result's per-document values combine into the corpus values a refresh compares (None: the
# corpus values as recorded, this project's pooled ones).
AGGREGATES = {
    "pooled": None,
    "official": official_aggregate,
    "official_before_a7082c3": official_aggregate_before_a7082c3,
}
Finite = Annotated[float, Field(allow_inf_nan=False)]
# The settings a recorded result and its refresh must share (the rest, the head's blocks and the device,
# move numbers by float rounding, which the tolerance is for).
COMPARED_SETTINGS = (
    "add_bos",
    "context_limit",
    "allow_truncation",
    "grid",
    "documents",
    "dtype",
    "head_dtype",
)


@pydantic.dataclasses.dataclass(frozen=True)
class PinnedModel:
    """A model of a refresh: its ``model`` group fields (``name`` required) and, instead of a recorded
    result, the values it must give (``expected``: metric -> value)."""

    choice: ModelChoice
    expected: dict[str, Finite] | None = None

    @property
    def name(self) -> str:
        return str(self.choice.name)


@pydantic.dataclasses.dataclass(frozen=True)
class Refresh:
    """A refresh (``conf/leaderboard_refresh.yaml`` and its ``refresh/`` group file)."""

    artifact: str
    recorded: str
    tolerance: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    models: list[dict[str, Any]]
    fingerprint: Text | None = None
    contents: Text | None = None  # the exact contents hash (a Hub revision's bytes); None: not pinned
    discrete: Text | None = None  # the discrete hash (the same artifact, regenerated anywhere)
    aggregate: Literal[tuple(AGGREGATES)] = "pooled"
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    record: bool = False
    launcher: str | None = None
    launcher_args: list[Text] = dataclasses.field(default_factory=list)
    work_dir: str = "artifacts/refresh"

    def pinned(self) -> list[PinnedModel]:
        """The models, each checked as a ``model`` group (an unknown key or a missing name is an error)."""
        out = []
        for i, item in enumerate(self.models):
            fields = {k: v for k, v in item.items() if k != "expected"}
            choice = ModelChoice.parse(fields, prefix=f"models.{i}.")
            if not choice.name:
                raise PipelineError(f"setting models.{i}: give the model a name (the leaderboard's)")
            if str(choice.name) in (names := [m.name for m in out]):
                first = names.index(str(choice.name))
                raise PipelineError(
                    f"setting models.{i}: the name {choice.name!r} is already models.{first}'s: give each "
                    "model its own name (results are matched by it)"
                )
            out.append(parse(PinnedModel, {"choice": choice, "expected": item.get("expected")}))
        return out


def recorded_rows(path: Path) -> dict[str, dict[str, Any]]:
    """The recorded results by model name (validated like any results file; one line per name)."""
    path = locate_input(path)
    if not path.is_file():
        raise PipelineError(
            f"no recorded results at {path}: record them with `make leaderboard-refresh ARGS=record=true`"
        )
    return by_name(results.read_lines(path), f"the recorded results {path}")


def by_name(found: list[tuple[int, dict[str, Any], Any]], where: str) -> dict[str, dict[str, Any]]:
    """Result lines by model name without its ``@ctx<N>`` (a pinned model's name); two lines of one
    name are an error (which one would be compared?)."""
    rows: dict[str, tuple[int, dict[str, Any]]] = {}
    for number, obj, _ in found:
        name = context_name(obj["model_name"], None)
        if name in rows:
            raise PipelineError(
                f"{where} hold two results of {name} (lines {rows[name][0]} and {number}): keep one"
            )
        rows[name] = (number, obj)
    return {name: obj for name, (_, obj) in rows.items()}


def write_model_options(models: list[PinnedModel], conf_dir: Path) -> list[str]:
    """One ``model`` group option per pinned model (``conf/model/local.yaml`` with its fields), in a
    config directory of this run; returns their names."""
    base = conf_file("model/local.yaml")
    (conf_dir / "model").mkdir(parents=True, exist_ok=True)
    names = []
    for i, model in enumerate(models):
        names.append(f"refresh-{i}")
        fields = dataclasses.asdict(model.choice)
        (conf_dir / "model" / f"{names[-1]}.yaml").write_text(yaml.safe_dump(base | fields), encoding="utf-8")
    return names


def score_command(refresh: Refresh, options: list[str], conf_dir: Path, scores: Path) -> list[str]:
    """The score stage as a multirun over the pinned models, with the refresh's settings."""
    artifact = normalized_location(refresh.artifact)
    settings = [f"{key}={json.dumps(value)}" for key, value in refresh.settings.items()]
    command = [sys.executable, "-m", "pipeline.commands.score", "--multirun", f"--config-dir={conf_dir}"]
    command += [f"model={','.join(options)}", f"artifact={json.dumps(artifact)}"]
    command += [f"results={json.dumps(str(scores.absolute()))}", "progress=false", *settings]
    if refresh.launcher:
        command.append(f"hydra/launcher={refresh.launcher}")
    return command + list(refresh.launcher_args)


def score_all(refresh: Refresh, models: list[PinnedModel]) -> list[dict[str, Any]]:
    """Score every pinned model (a multirun of the score stage); their result lines, in pinned order."""
    work = Path(refresh.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work, prefix="run-") as tmp:
        conf_dir, scores = Path(tmp) / "conf", Path(tmp) / "scores.jsonl"
        options = write_model_options(models, conf_dir)
        done = subprocess.run(score_command(refresh, options, conf_dir, scores), check=False)
        if done.returncode != 0:
            raise PipelineError(
                f"the score stage failed (exit status {done.returncode}; its errors are above)"
            )
        fresh = by_name(results.read_lines(scores), "the refresh's scores")
    missing = [m.name for m in models if m.name not in fresh]
    if missing:
        raise PipelineError(f"the score stage gave no result for {', '.join(missing)}")
    return [fresh[m.name] for m in models]


def corpus_values(row: dict[str, Any], aggregate: str) -> dict[str, Any]:
    """A result's corpus values under the refresh's ``aggregate``."""
    combine = AGGREGATES[aggregate]
    return {**row["corpus"], **combine(row["documents"])} if combine else row["corpus"]


def compare(
    model: str,
    fresh: dict[str, Any],
    expected: dict[str, Any],
    tolerance: float,
    metrics: list[str] | None = None,
    source: str = "recorded",
) -> list[str]:
    """The mismatches of one model (``fresh`` and ``expected`` are corpus values), one line each;
    ``metrics``: those compared (default: the registry's perplexities)."""
    problems = []
    for metric in perplexities() if metrics is None else metrics:
        new, old = fresh[metric], expected[metric]
        if (new is None) != (old is None) or (new is not None and not abs(new - old) <= tolerance * abs(old)):
            problems.append(
                f"{model}: {metric} is {new} now, {source} {old} (relative tolerance {tolerance:g})"
            )
    return problems


def check_identity(refresh: Refresh) -> KeyTokenArtifact:
    """The pinned artifact must be the one the record was computed on, by fingerprint (its settings),
    by discrete hash (its texts, tokens and key spans) and, where pinned, by exact contents hash (its
    bytes, for a Hub revision); checked before scoring. Returns the artifact."""
    artifact = open_artifact(refresh.artifact, verify_hashes=False)
    found = {
        "fingerprint": artifact.manifest["fingerprint"],
        "discrete": artifact.identity.discrete,
        "contents": artifact.contents,
    }
    if not (refresh.discrete or refresh.contents):
        print(f"note: the refresh pins no discrete or contents hash; artifact {refresh.artifact} has {found}")
    for key, value in found.items():
        pinned = getattr(refresh, key)
        if not pinned and key == "fingerprint":
            print(f"note: the refresh pins no fingerprint; artifact {refresh.artifact} has {value}")
        elif pinned and value != pinned:
            raise PipelineError(
                f"artifact {refresh.artifact} has {key} {value[:12]}, the refresh pins {pinned[:12]}: it is "
                f"not the artifact the leaderboard was computed on{_which_documents(refresh, artifact, key)}"
            )
    return artifact


def _which_documents(refresh: Refresh, artifact: KeyTokenArtifact, key: str) -> str:
    """For a discrete mismatch, what differs from the first recorded result that records an identity
    (the documents whose key spans, tokens or values differ); empty without one."""
    path = locate_input(refresh.recorded)
    if key != "discrete" or refresh.record or not path.is_file():
        return ""
    for _, obj, _ in results.read_lines(path):
        record = obj.get("artifact") or {}
        if record.get("identity") is not None:
            expected = Identity.from_record(str(record.get("fingerprint")), record["identity"])
            return "; " + "; ".join(differences(artifact.identity, expected))
    return ""


def recorded_values(
    refresh: Refresh, models: list[PinnedModel], artifact: KeyTokenArtifact
) -> dict[str, dict[str, Any]]:
    """What each model must reproduce, by name: its ``expected`` values, else the corpus values of its
    recorded result (none when recording). Checked before any scoring, so a record that cannot be
    compared fails at once."""
    values = {m.name: dict(m.expected) for m in models if m.expected is not None}
    compared = [m.name for m in models if m.expected is None]
    if refresh.record or not compared:
        return values
    recorded = recorded_rows(Path(refresh.recorded))
    return values | {name: recorded_value(refresh, recorded, name, artifact) for name in compared}


def recorded_value(
    refresh: Refresh, recorded: dict[str, dict[str, Any]], name: str, artifact: KeyTokenArtifact
) -> dict[str, Any]:
    """One model's recorded corpus values under the refresh's aggregate, with every metric."""
    if name not in recorded:
        raise PipelineError(
            f"no recorded result for {name} in {refresh.recorded}: record it with record=true"
        )
    check_recorded_artifact(refresh, name, recorded[name].get("artifact") or {}, artifact)
    try:
        values = corpus_values(recorded[name], refresh.aggregate)
        missing = next((f"corpus.{m}" for m in perplexities() if m not in values), None)
    except (KeyError, TypeError, AttributeError) as exc:
        values, missing = {}, f"the per-document values ({type(exc).__name__}: {exc})"
    if missing:
        raise PipelineError(
            f"the recorded result of {name} in {refresh.recorded} lacks {missing}, which aggregate="
            f"{refresh.aggregate} compares: record it again with record=true"
        )
    return values


def check_recorded_artifact(
    refresh: Refresh, name: str, record: dict[str, Any], artifact: KeyTokenArtifact
) -> None:
    """The recorded result of ``name`` must have been scored on the same artifact as ``artifact``: by
    its identity (schema 4: the documents whose key spans, tokens or values differ are named), else by
    its exact contents hash."""
    where = f"the recorded result of {name} in {refresh.recorded}"
    fix = "record it again with record=true"
    if record.get("identity") is None:
        if record.get("contents") != artifact.contents:
            raise PipelineError(
                f"{where} was scored on contents {str(record.get('contents'))[:12]}, not artifact "
                f"{refresh.artifact}'s {artifact.contents[:12]} (it records no identity to compare "
                f"within the tolerance): {fix}"
            )
        return
    try:
        expected = Identity.from_record(str(record.get("fingerprint")), record["identity"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise PipelineError(f"{where} has a malformed artifact.identity ({exc}): {fix}") from None
    if problems := differences(artifact.identity, expected):
        raise PipelineError(
            f"{where} was scored on another artifact than {refresh.artifact}: " + "; ".join(problems)
        )


def check_model(
    refresh: Refresh,
    model: PinnedModel,
    row: dict[str, Any],
    expected: dict[str, Any],
    recorded: dict[str, Any] | None = None,
) -> list[str]:
    """One model's fresh result against its expected values (``recorded_values``); against a recorded
    result, only when both ran the same model with the same settings (``same_run``), and then every
    other number it records too (``results.differing_numbers``: counts, bits per byte, the grid, each
    document's values)."""
    fresh = corpus_values(row, refresh.aggregate)
    if model.expected is not None:
        return compare(model.name, fresh, expected, refresh.tolerance, list(expected), "expected")
    problems = compare(model.name, fresh, expected, refresh.tolerance)
    if recorded is not None:
        same_run(refresh, model.name, row, recorded)
        others = [p for p in results.differing_numbers(row, recorded, refresh.tolerance)
                  if p.split(" ", 1)[0] not in {f"corpus.{m}" for m in perplexities()}]  # fmt: skip
        problems += [f"{model.name}: {p}" for p in others[:6]]
        problems += [f"{model.name}: and {len(others) - 6} more numbers"] if len(others) > 6 else []
    return problems


def same_run(refresh: Refresh, name: str, fresh: dict[str, Any], recorded: dict[str, Any]) -> None:
    """The fresh result and the recorded one must be of the same model (every identifying field both
    record: weights, tokenizer, Hub commit, GGUF file) with the same settings (``COMPARED_SETTINGS``),
    else their numbers are no reproduction of each other: an error that says what differs."""
    now, then = model_identity(fresh.get("model")) or {}, model_identity(recorded.get("model")) or {}
    differ = [f"model {k}: {then[k]} recorded, {now[k]} now" for k in sorted(now.keys() & then.keys())
              if now[k] != then[k]]  # fmt: skip
    settings = (fresh.get("settings") or {}, recorded.get("settings") or {})
    differ += [f"{k}: {settings[1].get(k)} recorded, {settings[0].get(k)} now" for k in COMPARED_SETTINGS
               if settings[0].get(k) != settings[1].get(k)]  # fmt: skip
    if differ:
        raise PipelineError(
            f"the recorded result of {name} in {refresh.recorded} is not of the run the refresh repeats ("
            + "; ".join(differ)
            + "): its numbers would be compared with another run's; record it again with record=true"
        )


@dataclass(frozen=True)
class Refreshed:
    """The fresh results lines; where they were recorded (``record=true``), else None: they
    reproduced every expected result within ``tolerance``."""

    rows: list[dict[str, Any]]
    recorded: Path | None
    tolerance: float


# The record a refresh writes whole (record=true): a file of scores lines (``pipeline.outputs``)
RECORD = dataclasses.replace(results.KIND, appended=False)


def refresh_leaderboard(refresh: Refresh) -> Refreshed:
    """Every pinned model rescored against the pinned artifact; the results recorded (``record``) or
    compared with the expected ones (a difference is an error naming it)."""
    check(Output("work_dir", Path(refresh.work_dir), folder_for("folders of runs", "leaderboard-refresh")))
    record = check(Output("recorded", Path(refresh.recorded), RECORD)) if refresh.record else None
    models = refresh.pinned()
    artifact = check_identity(refresh)
    expected = recorded_values(refresh, models, artifact)  # before the (long) scoring
    fresh_rows = score_all(refresh, models)
    if record is not None:
        data = "".join(strict_json(r, sort_keys=True) + "\n" for r in fresh_rows).encode()
        write_bytes_atomic(record.path, data, record)
        return Refreshed(fresh_rows, record.path, refresh.tolerance)
    problems = []
    recorded = {} if all(m.expected is not None for m in models) else recorded_rows(Path(refresh.recorded))
    for model, row in zip(models, fresh_rows, strict=True):
        problems += check_model(refresh, model, row, expected[model.name], recorded.get(model.name))
    if problems:
        raise PipelineError("leaderboard refresh differs from the expected results: " + "; ".join(problems))
    return Refreshed(fresh_rows, None, refresh.tolerance)
