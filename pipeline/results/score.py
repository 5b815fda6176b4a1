"""The results file ``scores.jsonl``: one JSON line per score run. This module owns its schema.

Written by the score stage (``score_row``, ``lines.append``), read by the leaderboard (``read_scores``: one
validated, flattened row per line) and by reproducible refreshes (``read_lines``). A line holds the
model and its hash or revision, the artifact's name and fingerprint, the settings, library versions,
date and wall time, and the corpus and per-document values of every metric of the registry
(``pipeline.metric_registry``: each a field of the corpus values, checked as its kind says, and a
column of the leaderboard frame).

Lines carry ``schema_version`` (``RESULTS_VERSION``); a line without it is version 1, from before
bits per byte (its ``bpb`` and ``key_bpb`` read as missing). From version 3 a line names the contents
it was scored on (``artifact.contents``, ``pipeline.artifact.schema.contents_sha256``) beside the
fingerprint, and what was checked against the artifact's inputs (``artifact.checked``); older lines
read with ``contents`` missing (they cannot say which tables they were scored on). From version 4 a
line also carries the artifact's identity as *the same artifact* (``artifact.identity``:
``pipeline.artifact.identity.Identity.record``, the discrete hash and per-document hashes and value
summaries), so results scored on an equivalent artifact regenerated on another machine are compared
and shown with it (``same_artifact``); older lines match only their exact contents. From version 5 a
run on part of the artifact names the documents it scored (``settings.documents``, so its result id
differs from the whole run's; ``pipeline.results.keys.partial``), a Hub model's ``revision`` is the
commit loaded and a local or Hub model's record hashes its tokenizer files (``tokenizer_sha256``).
A line of a newer version is an error.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, PlainValidator, create_model, model_validator

from pipeline import __version__
from pipeline.artifact.identity import Identity, check_record, differences
from pipeline.files import recorded_path
from pipeline.metric_registry import Metric, metrics
from pipeline.models.identity import identify_in_memory
from pipeline.outputs import Checked
from pipeline.provenance import json_sha256, library_versions
from pipeline.results import lines
from pipeline.results.keys import model_key, partial

RESULTS_VERSION = 5  # 2: bits per byte (bpb, key_bpb, n_bytes, n_key_bytes); 3: artifact.contents;
# 4: artifact.identity; 5: settings.documents of a partial run, Hub commits and tokenizer hashes
SCORE_HINT = "run `make score MODEL=...` first"


# ----------------------------------------------------------------------------------------------
# The schema of one line


def _number(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("is not a number")
    if isinstance(value, int) and abs(value) > lines.LARGEST:  # beyond a float, or any use of one
        raise ValueError(f"is {lines.shown(value)}, beyond +-{lines.LARGEST:g}")
    if not math.isfinite(value):
        raise ValueError(f"is {value}, not a finite number")
    return float(value)


def _perplexity(value: Any) -> float | None:
    number = _number(value)
    if number is not None and number < 1:
        raise ValueError(f"is {lines.shown(value)}: a perplexity is at least 1")
    return number


def _fraction(value: Any) -> float | None:
    number = _number(value)
    if number is not None and not 0 <= number <= 1:
        raise ValueError(f"is {lines.shown(value)}: a fraction lies in [0, 1]")
    return number


def _count(value: Any) -> int | None:
    number = _number(value)
    if number is None:
        return None
    if number != int(number):
        raise ValueError("is not an integer")
    if not 0 <= value < 2**63:
        raise ValueError(f"is {lines.shown(value)}: a count lies in [0, 2**63)")
    return int(value)


def _date(value: Any) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("is not a string")
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{value!r} is not an ISO 8601 time") from None
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


def _bits(value: Any) -> float | None:
    number = _number(value)
    if number is not None and number < 0:
        raise ValueError(f"is {lines.shown(value)}: bits per byte are at least 0")
    return number


def _version(value: Any) -> int:
    version = _count(value)
    if version is None or version < 1:
        raise ValueError("is not a schema version (1, 2, ...)")
    if version > RESULTS_VERSION:
        raise ValueError(f"is {version}: written by a newer pipeline, which reads up to {RESULTS_VERSION}")
    return version


Perplexity = Annotated[float | None, PlainValidator(_perplexity)]
Fraction = Annotated[float | None, PlainValidator(_fraction)]
Bits = Annotated[float | None, PlainValidator(_bits)]
Number = Annotated[float | None, PlainValidator(_number)]
CHECKS = {"perplexity": Perplexity, "bits": Bits, "fraction": Fraction, "number": Number}  # by metric kind
Count = Annotated[int | None, PlainValidator(_count)]
Date = Annotated[datetime | None, PlainValidator(_date)]
Version = Annotated[int, PlainValidator(_version)]


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class ArtifactRef(_Part):
    name: str
    fingerprint: str
    contents: str | None = None  # from schema 3: the contents hash of the tables scored
    identity: dict[str, Any] | None = None  # from schema 4: ``Identity.record`` of the artifact scored


class CorpusCounts(_Part):
    """The corpus values other than the metrics'."""

    key_char_coverage: Fraction = None
    n_tokens: Count = None
    n_key_tokens: Count = None
    unavailable: dict[str, str] | None = None  # metric -> why it is null (e.g. a key_spans artifact)


def metric_fields(registered: tuple[Metric, ...]) -> dict[str, Any]:
    """Each metric as a field of a pydantic model: null when missing (a line older than the metric),
    else checked as its kind says."""
    return {m.name: (CHECKS[m.kind], None) for m in registered}


@cache
def corpus_model(registered: tuple[Metric, ...]) -> type[CorpusCounts]:
    """The corpus values of a line: the counts and every metric of ``registered``."""
    return create_model("CorpusValues", __base__=CorpusCounts, **metric_fields(registered))


def _corpus_values(value: Any) -> CorpusCounts:
    return corpus_model(metrics()).model_validate(value)


CorpusValues = Annotated[CorpusCounts, PlainValidator(_corpus_values)]  # the metrics registered now


class SettingsRef(_Part):
    context_limit: Count = None
    documents: list[str] | None = None  # from schema 5: the ids scored, when fewer than the artifact's


class ScoreLine(_Part):
    schema_version: Version = 1
    model_name: str
    artifact: ArtifactRef
    corpus: CorpusValues
    settings: SettingsRef | None = None
    result_id: str | None = None
    date: Date = None

    @model_validator(mode="after")
    def _names_contents(self) -> ScoreLine:
        if self.schema_version >= 3 and self.artifact.contents is None:
            raise ValueError(
                "`artifact.contents` is missing (a result of schema 3 names the tables it scored)"
            )
        if self.schema_version >= 4:
            _check_identity(self.artifact)
        return self


def _check_identity(artifact: ArtifactRef) -> None:
    """A schema-4 line's ``artifact.identity`` must be readable as one (``identity.check_record``: every
    field of its type); the error names the first field that is not."""
    try:
        check_record(artifact.identity, "artifact.identity")
    except ValueError as exc:
        raise ValueError(
            f"`artifact.identity` is missing or malformed: {exc} (a result of schema 4 records the "
            "identity of the artifact it scored)"
        ) from None


def frame_schema() -> dict[str, Any]:
    """The leaderboard frame's columns (``read_scores``; polars is imported where a table is built)."""
    import polars as pl

    return {
        "line": pl.Int64,
        "result_id": pl.String,
        "model_name": pl.String,
        "artifact": pl.String,
        "fingerprint": pl.String,
        "contents": pl.String,  # null for lines before schema 3
        "identity": pl.String,  # ``artifact.identity`` as JSON; null for lines before schema 4
        "settings": pl.String,
        "model": pl.String,  # the model's identity as JSON (``keys.model_key``); null for a line without one
        "partial": pl.String,  # "1 of 3 documents" for a run on part of the artifact (``keys.partial``)
        "context_limit": pl.Int64,
        **{m.name: pl.Float64 for m in metrics()},
        "n_tokens": pl.Int64,
        "n_key_tokens": pl.Int64,
        "key_char_coverage": pl.Float64,
        "date": pl.Datetime("us", "UTC"),
        "unavailable": pl.String,  # why a metric is null ("; "-separated), or null
    }


# ----------------------------------------------------------------------------------------------
# Writing


def score_row(model_name: str, lm: Any, result: Any, seconds: float) -> dict[str, Any]:
    """One line: the numbers of a ``pipeline.score.engine.ScoreResult`` of the loaded model ``lm`` and
    everything needed to reproduce them; ``seconds`` is the wall time of the whole run."""
    artifact, settings = result.key_tokens, result.settings
    model = model_record(lm, settings["add_bos"])
    return {
        "schema_version": RESULTS_VERSION,
        "result_id": result_id(model, result.fingerprint, artifact.contents, settings),
        "model_name": model_name,
        "model": model,
        "artifact": artifact_record(artifact),
        "settings": settings,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_seconds": round(seconds, 2),
        "pipeline_version": __version__,
        "libraries": library_versions(),
        "corpus": result.corpus,
        "documents": result.documents,
    }


# A file of these lines as an output (``pipeline.outputs``): one that holds only such lines
KIND = lines.results_lines("scores", "score", ScoreLine)


def append(target: Path | Checked, row: dict[str, Any]) -> None:
    """Validate (a line its readers would refuse is never written), then append one strict-JSON line
    where ``target`` was checked (a path is checked now, as ``results=``)."""
    lines.validate(row, ScoreLine)
    lines.append(target, row, KIND)


def model_record(lm: Any, add_bos: bool) -> dict[str, Any]:
    """What a result records of the model (a ``LoadedModel``): its source (a model in memory hashed
    first: its parameters and tokenizer), and the BOS it was given."""
    identify_in_memory(lm.source, lm.model, lm.tokenizer)
    return {**lm.source.to_dict(), "bos_token_id": lm.bos_token_id if add_bos else None}


def result_id(model: dict[str, Any], fingerprint: str, contents: str | None, settings: dict[str, Any]) -> str:
    """What a result's numbers depend on (the model, the artifact's settings and tables, the score
    settings), hashed."""
    return json_sha256({"model": model, "artifact": fingerprint, "contents": contents, "settings": settings})[
        :16
    ]


def artifact_record(artifact: Any) -> dict[str, Any]:
    """What a result records of the artifact it was scored against (a ``KeyTokenArtifact``)."""
    return {
        "name": artifact.root.name,
        "fingerprint": artifact.manifest["fingerprint"],
        "contents": artifact.contents,
        "identity": artifact.identity.record(),
        "checked": artifact.checked,
        "source": artifact.origin or {"path": recorded_path(artifact.root)},
        "kind": artifact.kind,
        "evaluator": artifact.settings["evaluator"]["spec"],
        **{k: artifact.settings[k] for k in ("K", "d", "alpha", "beta")},
    }


# ----------------------------------------------------------------------------------------------
# Reading, with validation


def read_lines(path: str | Path) -> list[tuple[int, dict[str, Any], ScoreLine]]:
    """Every non-empty line as (1-based line number, the JSON object, its validated form)."""
    return lines.read(path, ScoreLine, what="scores", kind="result", hint=SCORE_HINT)


def read_scores(path: str | Path) -> Any:
    """One row per result line, flattened (a polars frame of ``frame_schema()``); ``line`` is the
    1-based line number."""
    import polars as pl

    rows = [_flat(number, obj, line) for number, obj, line in read_lines(path)]
    return pl.DataFrame(rows, schema=frame_schema(), orient="row")


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def same_artifact(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two results were scored on the same artifact, by their records (``fingerprint``,
    ``contents`` and ``identity``, a dict or its JSON; a frame row has them): the same fingerprint and,
    where both record an identity, the same artifact within the tolerance (``identity.differences``),
    else the same exact contents."""
    if a.get("fingerprint") != b.get("fingerprint"):
        return False
    ids = [_identity(r) for r in (a, b)]
    if None in ids:
        return a.get("contents") == b.get("contents")
    return not differences(ids[0], ids[1])


def differing_numbers(new: dict[str, Any], old: dict[str, Any], tolerance: float) -> list[str]:
    """Every number a result line ``old`` records in ``corpus`` (its grid included) and per document
    (``documents``, by ``doc_id``) that ``new`` does not give within the relative ``tolerance`` (counts
    and flags: exactly; missing, or NaN, is a difference), one "field: new now, old recorded" each."""
    mine, theirs = _numbers(_by_doc(new)), _numbers(_by_doc(old))
    out = []
    for where, then in theirs.items():
        now = mine.get(where)
        same = now == then if isinstance(then, (bool, int)) and isinstance(now, (bool, int)) else (
            isinstance(now, (int, float)) and abs(now - then) <= tolerance * abs(then)
        )  # fmt: skip
        if not same:
            out.append(f"{where} is {now} now, {then} recorded")
    return out


def _by_doc(line: dict[str, Any]) -> dict[str, Any]:
    docs = line.get("documents")
    keyed = {str(d.get("doc_id")): d for d in docs if isinstance(d, dict)} if isinstance(docs, list) else {}
    return {"corpus": line.get("corpus") or {}, "documents": keyed}


def _numbers(value: Any, where: str = "") -> dict[str, Any]:
    """The numbers (and flags) of nested dicts, by dotted path."""
    if isinstance(value, dict):
        return {
            k: v
            for key, item in value.items()
            for k, v in _numbers(item, f"{where}.{key}".lstrip(".")).items()
        }
    return {where: value} if isinstance(value, (bool, int, float)) else {}


def _identity(record: dict[str, Any]) -> Identity | None:
    value = record.get("identity")
    if value is None:
        return None
    return Identity.from_record(record["fingerprint"], json.loads(value) if isinstance(value, str) else value)


def _flat(number: int, obj: dict[str, Any], line: ScoreLine) -> dict[str, Any]:
    corpus = line.corpus
    return {
        "line": number,
        "result_id": line.result_id,
        "model_name": line.model_name,
        "artifact": line.artifact.name,
        "fingerprint": line.artifact.fingerprint,
        "contents": line.artifact.contents,
        "identity": _json(line.artifact.identity) if line.artifact.identity is not None else None,
        "settings": json.dumps(obj.get("settings") or {}, sort_keys=True, separators=(",", ":")),
        "model": model_key(obj.get("model")),
        "partial": partial(obj),
        "context_limit": line.settings.context_limit if line.settings else None,
        **{m.name: getattr(corpus, m.name) for m in metrics()},
        "n_tokens": corpus.n_tokens,
        "n_key_tokens": corpus.n_key_tokens,
        "key_char_coverage": corpus.key_char_coverage,
        "date": line.date,
        "unavailable": unavailable_text(corpus.unavailable),
    }


def unavailable_text(unavailable: dict[str, str] | None) -> str | None:
    """Why the null metrics are null, "; "-separated (the frame's ``unavailable``), or None."""
    names = {m.name for m in metrics()}
    return "; ".join(v for k, v in (unavailable or {}).items() if k in names) or None
