"""Key tokens against LooGLE's evidence (``make loogle-keytokens``): no model runs, only a LooGLE
key-token artifact (``corpus=loogle_sample`` or ``corpus=loogle``) and its located evidence.

Definitions (docs/loogle.md, "Key tokens against evidence"):

- *Scored tokens*: the evaluator tokens with a short context (LSD not null); no other token counts.
  With ``first_window=false``, nor do those of the first short window (sequence positions K .. K+d-1),
  whose short context is their whole prefix (LSD 0 by paper Eq. 8).
- *Evidence used*: each located evidence string whose every span lies in the kept text (the cut's
  prefix); an unlocated string, and a located one with a span beyond the kept text, is counted and
  left out (``excluded``), never guessed or clipped.
- *In evidence*: a token whose characters ``[char_start, char_end)`` overlap a used span by at least
  one character.
- *Inside vs outside*: the pooled mean over tokens in evidence minus that over the others, for the LSD
  and for the key-token rate (``is_key``).
- *Null*: the evidence mask of each document shifted circularly over its scored tokens by an offset
  drawn uniformly from ``0 .. n - 1`` (independently per document, ``numpy.random.default_rng(seed)``),
  which keeps each document's number and runs of evidence tokens and its LSD sequence. ``p_greater``
  = (1 + #{null >= observed}) / (1 + shifts); ``p_two_sided`` the same with
  ``|null - null mean| >= |observed - null mean|``.
- *Dependency distance* (the paper's Figure 3 on real text): for each question with at least two used
  evidence strings, its spans in text order; the tokens of its last span are where a reader has all
  its evidence (its *answer tokens*: LooGLE's answers are rarely verbatim in the text), and the
  distance is the number of evaluator tokens from the first token of its earliest span to the first
  token of its last span. Per question, the mean LSD of the last span's scored tokens against the
  distance: Spearman's rho, its two-sided p-value and n (questions). A question whose last span has no
  scored token is counted and left out.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pydantic.dataclasses
from pydantic import Field

from pipeline import definition
from pipeline.artifact.qa import ArtifactQuestion, Span, artifact_questions
from pipeline.artifact.reader import iter_documents, open_artifact
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.definition import NotBool
from pipeline.errors import PipelineError
from pipeline.files import recorded_path, write_json_atomic
from pipeline.formats import file_slug
from pipeline.marks import json_report, made_by, picture
from pipeline.outputs import Output, check
from pipeline.reporting.loogle_keytokens import write_evidence_plot

NULL = "each document's evidence mask shifted circularly over its scored tokens, offsets uniform per document"
DISTANCE = (
    "evaluator tokens from the first token of a question's earliest used evidence span to the first token "
    "of its last one; mean_lsd over the last span's scored tokens"
)


@dataclass(frozen=True)
class EvidenceSettings:
    """The permutation null (how many circular shifts, the seed of their offsets), and whether the
    tokens of the first short window count (their short context is their whole prefix: by paper Eq. 8
    their LSD is 0; they count in LongPPL, and by default here too)."""

    shifts: int = 10_000
    seed: int = 0
    first_window: bool = True

    def __post_init__(self) -> None:
        if self.shifts < 1:
            raise PipelineError(f"shifts={self.shifts}: give at least 1 circular shift (e.g. 10000)")


@dataclass
class DocumentTokens:
    """One document's scored tokens (LSD, key flag, in-evidence mask), which of all its tokens are
    scored (``scored``), every token's characters, and its kept text's length."""

    doc_id: str
    lsd: np.ndarray
    is_key: np.ndarray
    inside: np.ndarray
    scored: np.ndarray
    char_start: np.ndarray
    char_end: np.ndarray
    n_chars: int


@dataclass
class Analysis:
    """The report (JSON-ready) and what a plot draws: the LSD of tokens in and out of evidence."""

    report: dict[str, Any]
    lsd_inside: np.ndarray = field(default_factory=lambda: np.zeros(0))
    lsd_outside: np.ndarray = field(default_factory=lambda: np.zeros(0))


def used_evidence(
    questions: list[ArtifactQuestion], n_chars: dict[str, int]
) -> tuple[dict[tuple[str, int], list[tuple[Span, ...]]], dict[str, int]]:
    """Each question's used evidence strings (their spans), by (doc_id, question_index), and the counts
    of every string: total, unlocated, beyond the kept text, used."""
    used: dict[tuple[str, int], list[tuple[Span, ...]]] = {}
    counts = {"strings": 0, "unlocated": 0, "beyond_kept_text": 0, "used": 0}
    for q in questions:
        for ev in q.evidence:
            counts["strings"] += 1
            if not ev.located:
                counts["unlocated"] += 1
            elif not ev.inside(n_chars[q.doc_id]):
                counts["beyond_kept_text"] += 1
            else:
                counts["used"] += 1
                used.setdefault((q.doc_id, q.question_index), []).append(ev.spans)
    return used, counts


def overlap_mask(starts: np.ndarray, ends: np.ndarray, spans: list[Span], n_chars: int) -> np.ndarray:
    """Whether each token ``[start, end)`` shares at least one character with a span."""
    covered = np.zeros(n_chars + 1, dtype=np.int64)
    for start, end in spans:
        covered[start] += 1
        covered[end] -= 1
    chars = np.concatenate([[0], np.cumsum(np.cumsum(covered)[:n_chars] > 0)])
    return chars[np.minimum(ends, n_chars)] - chars[np.minimum(starts, n_chars)] > 0


def document_tokens(
    artifact: KeyTokenArtifact, spans: dict[str, list[Span]], first_window: bool = True
) -> list[DocumentTokens]:
    """Every document's scored tokens, marked in or out of its used evidence spans; the key flag is
    the artifact's own rule at its alpha and beta (``definition.is_key``, as ``is_key`` stores it)."""
    alpha, beta = artifact.settings["alpha"], artifact.settings["beta"]
    K, d = artifact.settings["K"], artifact.settings["d"]
    offset = 1 if artifact.settings.get("add_bos") else 0  # a token's position in the scored sequence
    out = []
    for doc in iter_documents(artifact):
        lsd = doc.lsd
        keep = ~np.isnan(lsd)
        if not first_window:
            keep[: max(0, K + d - offset)] = False
        starts = doc.eval_offsets[:, 0].astype(np.int64)
        ends = doc.eval_offsets[:, 1].astype(np.int64)
        inside = overlap_mask(starts, ends, spans.get(doc.doc_id, []), len(doc.text))
        is_key = definition.is_key(lsd, doc.long, alpha, beta)
        out.append(
            DocumentTokens(
                doc.doc_id,
                lsd[keep],
                np.asarray(is_key, dtype=bool)[keep],
                inside[keep],
                keep,
                starts,
                ends,
                len(doc.text),
            )
        )
    return out


def shifted_sums(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """For every circular shift ``s``, the sum of ``values`` where ``np.roll(mask, s)`` is true (by FFT)."""
    n = len(values)
    spectrum = np.fft.rfft(values) * np.conj(np.fft.rfft(mask.astype(np.float64)))
    return np.fft.irfft(spectrum, n)


def permutation_test(
    values: list[np.ndarray], masks: list[np.ndarray], settings: EvidenceSettings
) -> dict[str, Any]:
    """Pooled mean in the mask minus out of it, against circular shifts of each document's mask
    (module doc); documents with no scored token are skipped."""
    pairs = [(v.astype(np.float64), m) for v, m in zip(values, masks, strict=True) if len(v)]
    n_in = sum(int(m.sum()) for _, m in pairs)
    n_all = sum(len(v) for v, _ in pairs)
    n_out = n_all - n_in
    if n_in == 0 or n_out == 0:
        raise PipelineError(
            "no scored token lies in located evidence (or none outside it): nothing to compare"
        )
    total = sum(float(v.sum()) for v, _ in pairs)
    rng = np.random.default_rng(settings.seed)
    sums = np.zeros(settings.shifts)
    observed_in = 0.0
    for v, m in pairs:
        shifted = shifted_sums(v, m)
        sums += shifted[rng.integers(0, len(v), settings.shifts)]
        observed_in += float(v[m].sum())
    null = sums / n_in - (total - sums) / n_out
    observed = observed_in / n_in - (total - observed_in) / n_out
    centre, spread = float(null.mean()), float(null.std(ddof=1)) if settings.shifts > 1 else 0.0
    tol = 1e-9 * max(1.0, abs(observed))  # FFT rounding: the identity shift equals the observed value
    return {
        "inside_mean": observed_in / n_in,
        "outside_mean": (total - observed_in) / n_out,
        "difference": observed,
        "null_mean": centre,
        "null_sd": spread,
        "p_greater": (1 + int((null >= observed - tol).sum())) / (1 + settings.shifts),
        "p_two_sided": (1 + int((np.abs(null - centre) >= abs(observed - centre) - tol).sum()))
        / (1 + settings.shifts),
        "n_inside": n_in,
        "n_outside": n_out,
    }


def dependency_rows(
    used: dict[tuple[str, int], list[tuple[Span, ...]]], docs: list[DocumentTokens]
) -> tuple[list[dict[str, Any]], int]:
    """Per question with two or more used evidence strings: the dependency distance and the mean LSD
    of its last span's scored tokens (module doc); and how many such questions had none scored."""
    by_id = {d.doc_id: d for d in docs}
    rows, unscored = [], 0
    for (doc_id, question), strings in used.items():
        if len(strings) < 2:
            continue
        doc = by_id[doc_id]
        spans = sorted(span for spans in strings for span in spans)
        first, last = spans[0], spans[-1]
        first_token = int(np.searchsorted(doc.char_end, first[0], side="right"))
        last_token = int(np.searchsorted(doc.char_end, last[0], side="right"))
        scored = overlap_mask(doc.char_start, doc.char_end, [last], doc.n_chars)[doc.scored]
        if not scored.any():
            unscored += 1
            continue
        lsd = doc.lsd[scored]
        rows.append(
            {
                "doc_id": doc_id,
                "question_index": question,
                "distance_tokens": last_token - first_token,
                "n_tokens": int(scored.sum()),
                "mean_lsd": float(lsd.mean()),
                "key_rate": float(doc.is_key[scored].mean()),
            }
        )
    return rows, unscored


def spearman(xs: list[float], ys: list[float]) -> dict[str, float | int | None]:
    """Spearman's rho and its two-sided p-value (scipy), None when undefined (n < 3 or constant)."""
    from scipy import stats

    out: dict[str, float | int | None] = {"n": len(xs), "spearman_r": None, "spearman_p": None}
    if len(xs) >= 3 and len(set(xs)) > 1 and len(set(ys)) > 1:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = stats.spearmanr(xs, ys)
        out |= {"spearman_r": float(result.statistic), "spearman_p": float(result.pvalue)}
    return out


def analyse(artifact: KeyTokenArtifact, settings: EvidenceSettings) -> Analysis:
    """The whole comparison of the module doc for one artifact."""
    if not artifact.has_token_values:
        raise PipelineError(
            f"artifact {artifact.root} holds key spans only (no per-token LSD): compute key tokens with "
            '`make keytokens ARGS="corpus=loogle_sample"`'
        )
    questions = artifact_questions(artifact)  # one error line when it has none
    n_chars = {d: len(t) for d, t in artifact.texts().items()}
    used, counts = used_evidence(questions, n_chars)
    if not used:
        raise PipelineError(
            f"artifact {artifact.root}: none of its {counts['strings']} evidence strings is located inside "
            f"the kept text ({counts['unlocated']} unlocated, {counts['beyond_kept_text']} beyond it): "
            "compute key tokens with a larger max_tokens (e.g. max_tokens=16384)"
        )
    spans: dict[str, list[Span]] = {}
    for (doc_id, _), strings in used.items():
        spans.setdefault(doc_id, []).extend(s for spans_ in strings for s in spans_)
    docs = document_tokens(artifact, spans, settings.first_window)
    masks = [d.inside for d in docs]
    rows, unscored = dependency_rows(used, docs)
    report = {
        "settings": asdict(settings),
        "evidence": counts,
        "documents": [document_summary(d) for d in docs],
        "lsd": permutation_test([d.lsd for d in docs], masks, settings),
        "key_rate": permutation_test([d.is_key for d in docs], masks, settings),
        "null": NULL,
        "dependency": {
            "distance": DISTANCE,
            "K": artifact.settings.get("K"),
            "questions": rows,
            "no_scored_token_in_last_span": unscored,
            **spearman([r["distance_tokens"] for r in rows], [r["mean_lsd"] for r in rows]),
        },
    }
    inside = np.concatenate([d.lsd[d.inside] for d in docs])
    outside = np.concatenate([d.lsd[~d.inside] for d in docs])
    return Analysis(report, inside, outside)


def document_summary(doc: DocumentTokens) -> dict[str, Any]:
    return {
        "doc_id": doc.doc_id,
        "n_scored": len(doc.lsd),
        "n_inside": int(doc.inside.sum()),
        "key_inside": int(doc.is_key[doc.inside].sum()),
        "key_outside": int(doc.is_key[~doc.inside].sum()),
    }


MAX_SHIFTS = 1_000_000  # each shift is one pass over every scored token: 10,000 take seconds


@pydantic.dataclasses.dataclass(frozen=True)
class RatesOptions:
    """`make loogle-keytokens`'s settings (``conf/loogle_keytokens.yaml``), checked before any work."""

    artifact: str
    shifts: Annotated[int, NotBool, Field(ge=1, le=MAX_SHIFTS)] = 10_000  # circular shifts (the null)
    seed: Annotated[int, NotBool, Field(ge=0)] = 0  # the shifts' offsets: numpy default_rng(seed)
    first_window: bool = True  # false: leave out the first short window's tokens
    results_dir: str = "artifacts/results"
    out: str | None = None  # None: <results_dir>/loogle-keytokens--<artifact>.json (the PNG beside it)


def rates_report(options: RatesOptions) -> tuple[dict[str, Any], Path, Path]:
    """The artifact's LSD and key tokens inside its evidence against outside, written as JSON with its
    figure beside it; the result and both paths."""
    settings = EvidenceSettings(options.shifts, options.seed, options.first_window)
    artifact = open_artifact(options.artifact)
    suffix = "" if settings.first_window else "--no-first-window"
    default = (
        Path(options.results_dir)
        / f"loogle-keytokens--{file_slug(artifact.root.name, 'artifact')}{suffix}.json"
    )
    given = Path(options.out) if options.out else default
    out = check(Output("out", given, json_report("loogle-keytokens")))
    plot = check(Output("out", given.with_suffix(".png"), picture("loogle-keytokens")))
    analysis = analyse(artifact, settings)
    source = {"path": recorded_path(artifact.root), "fingerprint": artifact.manifest["fingerprint"]}
    source |= {"contents": artifact.contents, "K": artifact.settings["K"], "d": artifact.settings["d"]}
    source["max_tokens"] = artifact.settings.get("max_tokens")
    result = {"made_by": made_by("loogle-keytokens"), "artifact": source, **analysis.report}
    write_json_atomic(out.path, result, out)
    write_evidence_plot(analysis, artifact.root.name, plot)
    return result, out.path, plot.path
