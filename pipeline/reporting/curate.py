"""What `make curate` and `make curate-select` print: where the shards are, how many rows and tokens, and
how to go on."""

from __future__ import annotations

from typing import Any


def summary(done: dict[str, Any]) -> str:
    """A curation's summary from its ``curate.json`` record (or a Slurm job array's submission)."""
    if "submitted" in done:
        return (
            f"Submitted Slurm job {done['submitted']} ({done['pending']} tasks): run the same command again "
            "once it is done to write curate.json"
        )
    shards = ", ".join(done["shards"])
    return "\n".join(
        [
            f"Curated {done['rows']} documents ({done['tokens']} evaluator tokens) into {done['output_dir']}",
            f"  shards: data/{{{shards}}}",
            f"  columns: {', '.join(done['columns'])}",
            "  select: longppl curate-select input=<this folder> select.by=longppl_mean_positive_lsd "
            "select.top=0.1 output_dir=<folder>",
        ]
    )


def selection_summary(done: dict[str, Any]) -> str:
    """A selection's summary from its card's record."""
    s = done["selection"]
    return (
        f"Selected {s['kept_documents']} of {s['documents']} documents ({s['kept_tokens']} of {s['tokens']} "
        f"tokens) by {s['by']} {s['rule']} into {done['output_dir']} (load it with "
        f"datasets.load_dataset('{done['output_dir']}'))"
    )
