"""`make curate-select`: a finished curation (`make curate`'s folder) filtered by any numeric column, the
top fraction (``select.top``) or a threshold (``select.min``), written as a dataset that
``datasets.load_dataset(<folder>)`` or ``load_dataset("parquet", data_files=...)`` reads: its shard
``train-00000-of-00001.parquet`` in its data folder (the kept rows in the curation's order) and a dataset card
(README.md with YAML front matter, as `make publish` writes) that records the evaluator and its identity,
the key-token settings and the selection (column, rule, documents and tokens kept of how many).

Ties and nulls: the top fraction keeps ceil(top x documents) rows, ranked by the column (largest first,
ties by the curation's order); a row whose value is null (a document of at most K tokens) is never kept.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass as plain_dataclass
from pathlib import Path
from typing import Any

import polars as pl
import yaml
from pydantic import Field
from pydantic.dataclasses import dataclass

from pipeline.errors import PipelineError
from pipeline.files import write_bytes_atomic, write_table_atomic
from pipeline.keytokens.curation import DATA, RECORD, shard_name
from pipeline.marks import marked_folder
from pipeline.outputs import Output, check, make_folder
from pipeline.reporting.common import md_code
from pipeline.settings import Text
from pipeline.sharing.hub_dataset import CARD, CITATION

# Its output folder: new, empty, or one it made (``.longppl-curate-select``), checked before anything is read.
SELECTED = marked_folder("curate-select")


@dataclass(frozen=True)
class Rule:
    """``select.<key>=``: the column, and the top fraction or the threshold (exactly one)."""

    by: Text = "longppl_mean_positive_lsd"
    top: float | None = Field(default=None, gt=0, le=1)
    min: float | None = None


@dataclass(frozen=True)
class SelectOptions:
    input: Text
    output_dir: Text
    select: Rule
    license: Text = "other"


@plain_dataclass
class Curated:
    """A finished curation: its record and its rows."""

    record: dict[str, Any]
    rows: pl.DataFrame


def read_curation(folder: Path) -> Curated:
    """The curation in ``folder``: its ``curate.json`` and exactly the shards it lists."""
    try:
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise PipelineError(f"input={folder} is not a finished curation (no readable {RECORD}): pass the "
                            "output_dir of a make curate run that completed") from None  # fmt: skip
    listed = set(record["shards"])
    present = {p.name for p in (folder / DATA).glob("*.parquet")}
    if listed != present:
        odd = sorted(listed - present)[0] if listed - present else sorted(present - listed)[0]
        what = "missing" if odd in listed else "not one of its shards"
        raise PipelineError(
            f"{folder / DATA / odd} is {what} ({RECORD} lists {len(listed)}): run make curate again into "
            "this folder"
        )
    rows = pl.concat([pl.read_parquet(folder / DATA / name) for name in sorted(listed)], how="vertical")
    return Curated(record, rows)


def selected(rows: pl.DataFrame, rule: Rule) -> tuple[pl.DataFrame, str]:
    """The rows the rule keeps (in their order) and the rule in words."""
    numeric = [n for n, t in rows.schema.items() if t.is_numeric()]
    if rule.by not in numeric:
        raise PipelineError(
            f"setting select.by={rule.by}: no numeric column of that name (its numeric columns: "
            f"{', '.join(numeric)}); pass one of them"
        )
    if (rule.top is None) == (rule.min is None):
        raise PipelineError("pass exactly one of select.top=<fraction in (0, 1]> and select.min=<threshold>")
    indexed = rows.with_row_index("_row")
    valid = indexed.filter(pl.col(rule.by).is_not_null() & pl.col(rule.by).is_not_nan())
    if rule.top is not None:
        keep = math.ceil(rule.top * rows.height)
        kept = valid.sort([rule.by, "_row"], descending=[True, False]).head(keep).sort("_row")
        return kept.drop("_row"), f"top {rule.top:g} ({keep} of {rows.height} documents, largest first)"
    kept = valid.filter(pl.col(rule.by) >= rule.min)
    return kept.drop("_row"), f">= {rule.min:g}"


def select(options: SelectOptions) -> dict[str, Any]:
    """The selection written (module docstring); returns the card's ``longppl`` record."""
    source, out = Path(options.input).absolute(), Path(options.output_dir).absolute()
    checked = check(Output("output_dir", out, SELECTED))
    curated = read_curation(source)
    kept, rule = selected(curated.rows, options.select)
    make_folder(checked)
    tokens = curated.rows["longppl_tokens"]
    record = {
        "evaluator": curated.record["evaluator"],
        "settings": {
            k: curated.record["settings"][k] for k in ("definition", "max_tokens", "add_bos", "compute")
        },
        "curation": {"plan": curated.record["plan"], "rows": curated.record["rows"]},
        "selection": {
            "by": options.select.by,
            "rule": rule,
            "documents": curated.rows.height,
            "kept_documents": kept.height,
            "tokens": int(tokens.sum()),
            "kept_tokens": int(kept["longppl_tokens"].sum()),
        },
    }
    write_table_atomic(out / DATA / shard_name(0, 1), kept.to_arrow())
    write_bytes_atomic(out / CARD, card(record, options.license).encode())
    return {**record, "output_dir": str(out)}


def card(record: dict[str, Any], license_id: str) -> str:
    """README.md: YAML front matter (PyYAML), then prose; the evaluator's strings in code spans."""
    front = {
        "license": license_id,
        "tags": ["longppl", "long-context", "data-selection"],
        "configs": [
            {"config_name": "default", "data_files": [{"split": "train", "path": f"{DATA}/*.parquet"}]}
        ],
        "longppl": record,
    }
    s, d = record["selection"], record["settings"]["definition"]
    evaluator = record["evaluator"] or {}
    definition = md_code(", ".join(f"{k}={d[k]}" for k in ("K", "d", "alpha", "beta", "gamma")))
    body = f"""
# Documents selected by LongPPL's per-document columns

{s["kept_documents"]} of {s["documents"]} documents ({s["kept_tokens"]} of {s["tokens"]} evaluator tokens),
kept by {md_code(s["by"])} {md_code(s["rule"])}. The columns (`longppl_*`) were computed by `make curate`
with the evaluator {md_code(str(evaluator.get("spec", "")))} and the key-token definition {definition}
(Fang et al., ICLR 2025): LSD = log P(x | full context) - log P(x | last K tokens).

```python
from datasets import load_dataset
rows = load_dataset("parquet", data_files="{DATA}/*.parquet", split="train")
```

## Citation

```bibtex
{CITATION}
```
"""
    return f"---\n{yaml.safe_dump(front, sort_keys=False, allow_unicode=True)}---\n{body}"
