"""How far apart are two CPUs' key-token artifacts of the same texts, and what does it mean for an
artifact of the paper's size? The measurement behind ``pipeline.artifact.identity.TOLERANCE``'s margin
(docs/reproducibility.md, "The tolerance, measured").

Reads two artifact folders (their ``tokens.parquet``; the same documents and tokens) and gives, per value
column (LCL, short log-prob, LSD, soft weight): the max |a - b|, its quantiles, how many values differ by
more than each of a few thresholds, the tolerance's margin (tolerance / max), and the largest difference
expected among ``--tokens`` values (the paper's 1.6M) from two fits of the tail (an exponential and a
power law, on the largest 0.2% of the differences), with how many values each fit puts beyond the
tolerance. For the key flags (LSD > alpha and LCL > beta): how many values lie near each threshold,
and how many flags are expected to flip between the two CPUs at the artifact's size and at ``--tokens``
(each token's flag flips when the threshold lies between its two values: density at the threshold x
mean |a - b|).

    .venv/bin/python -m studies.cross_cpu ../shared/data/cross-machine ../shared/data/cross-machine-intel \
        --out docs/reports/reproducibility/cross_cpu.json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from bench.shared import above, arguments, existing, output_file
from pipeline.artifact.identity import TOLERANCE

COLUMNS = ("long_logprob", "short_logprob", "lsd", "soft_weight")
THRESHOLDS = (1e-5, 3e-5, 5e-5, 7e-5, 1e-4, 1.5e-4, 2e-4, 3e-4, 4e-4, 1e-3)
TAIL = 0.002  # the tail fits use the largest 0.2% of the differences
NEAR = 0.05  # the window (nats either side) the density at a key-flag threshold is counted in


def tables(a: Path, b: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    x, y = (pq.read_table(p / "tokens.parquet").to_pydict() for p in (a, b))
    for key in ("doc_id", "token_index", "token_id"):
        if x[key] != y[key]:
            raise SystemExit(f"{a} and {b} do not hold the same tokens ({key} differs)")
    as_array = {k: np.array(v, dtype=float) for k, v in x.items() if k in COLUMNS}
    return as_array | {"is_key": np.array(x["is_key"])}, {
        k: np.array(v, dtype=float) for k, v in y.items() if k in COLUMNS
    }


def tail_fits(diff: np.ndarray, tokens: float, tolerance: float) -> dict[str, Any]:
    """The largest difference expected among ``tokens`` values, and how many beyond ``tolerance``, from
    an exponential and a power-law fit of the largest ``TAIL`` share of the differences (the fraction
    of differences at least each of them, against it)."""
    top = np.sort(diff)[::-1][: max(10, round(TAIL * len(diff)))]
    share = np.log(np.arange(1, len(top) + 1) / len(diff))
    slope_e, base_e = np.polyfit(top, share, 1)
    slope_p, base_p = np.polyfit(np.log(top), share, 1)
    return {
        "fitted_above": float(top[-1]),
        "exponential": {"scale": -1 / slope_e, "expected_max": (np.log(1 / tokens) - base_e) / slope_e,
                        "beyond_tolerance": tokens * np.exp(base_e + slope_e * tolerance)},
        "power_law": {"exponent": slope_p, "expected_max": np.exp((np.log(1 / tokens) - base_p) / slope_p),
                      "beyond_tolerance": tokens * np.exp(base_p + slope_p * np.log(tolerance))},
    }  # fmt: skip


def column_report(a: np.ndarray, b: np.ndarray, name: str, tokens: float) -> dict[str, Any]:
    both = ~np.isnan(a) & ~np.isnan(b)
    diff = np.abs(a[both] - b[both])
    quantiles = dict(
        zip(("median", "p99", "p99.9", "p99.99"), np.quantile(diff, [0.5, 0.99, 0.999, 0.9999]), strict=True)
    )
    return {
        "values": int(both.sum()),
        "max": float(diff.max()),
        "mean": float(diff.mean()),
        **{k: float(v) for k, v in quantiles.items()},
        "above": {f"{t:g}": int((diff > t).sum()) for t in THRESHOLDS},
        "tolerance": TOLERANCE[name],
        "margin": TOLERANCE[name] / float(diff.max()),
        "at_tokens": {"tokens": tokens, **tail_fits(diff, tokens, TOLERANCE[name])},
    }


def flag_report(
    x: dict[str, np.ndarray], y: dict[str, np.ndarray], alpha: float, beta: float, tokens: float
) -> dict:
    """Values near each key-flag threshold, and the flags expected to flip between the two CPUs."""
    scored = ~np.isnan(x["lsd"])
    lcl, lsd = x["long_logprob"][scored], x["lsd"][scored]
    d_lcl = np.abs(lcl - y["long_logprob"][scored])
    d_lsd = np.abs(lsd - y["lsd"][scored])
    n = int(scored.sum())
    scale = tokens / len(x["lsd"])  # the same share of tokens with a short context
    out = {
        "scored": n,
        "flags_differ": int((x["is_key"] != (y["lsd"] > alpha) & (y["long_logprob"] > beta)).sum()),
    }
    for name, values, diffs in (("lsd_at_alpha", lsd[lcl > beta] - alpha, d_lsd[lcl > beta]),
                                ("lcl_at_beta", lcl[lsd > alpha] - beta, d_lcl[lsd > alpha])):  # fmt: skip
        density = float((np.abs(values) < NEAR).sum() / (2 * NEAR) / n)  # per nat, per scored token
        out[name] = {
            "nearest": float(np.abs(values).min()),
            "within": {f"{w:g}": int((np.abs(values) < w).sum()) for w in (0.01, 0.02, 0.05, 0.1)},
            "density": density,
            "mean_difference": float(diffs.mean()),
            "expected_flips": n * density * float(diffs.mean()),
            "expected_flips_at_tokens": n * scale * density * float(diffs.mean()),
        }
    return out


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("a", type=existing)
    parser.add_argument("b", type=existing)
    parser.add_argument("--tokens", type=above(0), default=1.6e6, help="an artifact's size to extrapolate to")
    parser.add_argument("--out", type=output_file)
    args = parser.parse_args()
    x, y = tables(args.a, args.b)
    settings = json.loads((args.a / "manifest.json").read_text())["settings"]
    report = {
        "a": args.a.name,
        "b": args.b.name,
        "tokens": len(x["lsd"]),
        "columns": {c: column_report(x[c], y[c], c, args.tokens) for c in COLUMNS},
        "key_flags": flag_report(x, y, settings["alpha"], settings["beta"], args.tokens),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    from pipeline.errors import one_line_errors

    with one_line_errors():  # a PipelineError (an artifact that is not there, ...): one line
        main()
