"""LooGLE's automatic metrics, as its ``Evaluation/automatic_metrics.py`` (commit 6734382) computes them,
per question; ``pipeline.loogle.metrics.task_scores`` averages them as its ``automatic_eval.py`` does.

- BLEU-1, BLEU-4: nltk ``sentence_bleu`` over whitespace tokens (newlines as spaces), weights (1,0,0,0)
  and (0,0,0,1), no smoothing.
- ROUGE-1/2/L: the *recall* (``r``) of the ``rouge`` package (1.0.1), which LooGLE reports.
- METEOR: nltk ``single_meteor_score`` of the *sets* of whitespace tokens. LooGLE passes Python sets,
  whose iteration order follows the string hash seed, so its METEOR changes from run to run; here each
  set is its tokens in order of first occurrence (``ordered_set``): deterministic, and the text's order.
- BERTScore: LooGLE calls ``bert_score.score([reference], [hypothesis], lang="EN")`` and keeps element
  1, the "recall". bert-score's first argument is the candidate and its second the reference, so that
  recall is taken over the *prediction's* tokens: it is the prediction's precision against the answer.
  Computed the same way here with one scorer model loaded once (``roberta-large``, layer 17).
- Cloze: exact match (the predicted entity equals the answer's) and partial match (they share a
  whitespace token), counted over masks, as the repository's fix of its partial match (commit 6734382)
  counts them. LooGLE ``eval``s a prediction; here it is read with ``ast.literal_eval``: a prediction
  that is code, not a literal mapping, is a wrong answer and is never run.

An empty prediction is scored as the text "None", as LooGLE does.
"""

from __future__ import annotations

import ast
import contextlib
import sys
import warnings
from collections.abc import Iterator
from typing import Any

BERTSCORE_MODEL = "roberta-large"  # bert-score's model for lang="en"


def words(text: str) -> list[str]:
    return text.replace("\n", " ").split()


def hypothesis_text(prediction: str) -> str:
    return prediction if prediction != "" else "None"


def bleu(reference: str, hypothesis: str) -> tuple[float, float]:
    from nltk.translate.bleu_score import sentence_bleu

    ref, hyp = words(reference), words(hypothesis)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # nltk warns of every n-gram order without overlap
        return (
            float(sentence_bleu([ref], hyp, weights=(1, 0, 0, 0))),
            float(sentence_bleu([ref], hyp, weights=(0, 0, 0, 1))),
        )


def rouge_recall(reference: str, hypothesis: str) -> tuple[float, float, float]:
    """ROUGE-1, -2 and -L recall. A hypothesis with no sentence left after the package's split on "."
    (such as "...") makes the package raise, and LooGLE's run stop; here it scores 0. The package
    traces ROUGE-L's common subsequence back by recursion, one call per word of a sentence of each: the
    recursion limit is raised to that for the call (a sentence of ~1,000 words would exceed Python's
    default; a prediction's words are bounded, ``loogle.data.bounds.MAX_PREDICTION_WORDS``)."""
    from rouge import Rouge

    try:
        with recursion_room(len(words(hypothesis)) + len(words(reference))):
            scores = Rouge().get_scores(hyps=[hypothesis], refs=[reference])[0]
    except ValueError:
        if not [part for part in hypothesis.split(".") if part]:
            return 0.0, 0.0, 0.0
        raise
    return tuple(float(scores[name]["r"]) for name in ("rouge-1", "rouge-2", "rouge-l"))  # type: ignore[return-value]


@contextlib.contextmanager
def recursion_room(depth: int) -> Iterator[None]:
    """Python's recursion limit raised by ``depth`` calls for the block (room for them above the caller)."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(before + depth)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


def ordered_set(tokens: list[str]) -> list[str]:
    """The distinct tokens in order of first occurrence: LooGLE's ``set(tokens)`` in a fixed order."""
    return list(dict.fromkeys(tokens))


def meteor(reference: str, hypothesis: str) -> float:
    from nltk.translate.meteor_score import single_meteor_score

    return float(single_meteor_score(ordered_set(words(reference)), ordered_set(words(hypothesis))))


def wordnet_problem() -> str | None:
    """Why nltk cannot read WordNet (METEOR's synonyms), or None when it can."""
    from nltk.corpus import wordnet

    try:
        wordnet.ensure_loaded()
    except LookupError:
        return (
            "nltk finds no WordNet 3.0: run `make setup-loogle` (Debian's wordnet-base and "
            "wordnet-sense-index)"
        )
    return None


def similarity(reference: str, prediction: str, with_meteor: bool = True) -> dict[str, float | None]:
    """Every similarity metric of one answer but BERTScore (``bertscores`` does those together)."""
    hypothesis = hypothesis_text(prediction)
    bleu1, bleu4 = bleu(reference, hypothesis)
    rouge1, rouge2, rougel = rouge_recall(reference, hypothesis)
    return {
        "bleu1": bleu1,
        "bleu4": bleu4,
        "rouge1": rouge1,
        "rouge2": rouge2,
        "rougeL": rougel,
        "meteor": meteor(reference, hypothesis) if with_meteor else None,
    }


def bertscores(references: list[str], predictions: list[str], scorer: Any) -> list[float]:
    """LooGLE's BERTScore of each answer: element 1 of ``score([reference], [hypothesis])``."""
    return [
        float(scorer.score([reference], [hypothesis_text(prediction)])[1])
        for reference, prediction in zip(references, predictions, strict=True)
    ]


def cloze_mapping(prediction: Any) -> dict[Any, Any] | None:
    """A cloze prediction as a mapping: a mapping as it is, a string read as a Python literal (never
    run); anything else, or a literal that is not a mapping, is None (no entity predicted)."""
    if isinstance(prediction, dict):
        return prediction
    if not isinstance(prediction, str):
        return None
    try:
        value = ast.literal_eval(prediction)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def exact_match(reference: dict[str, str], prediction: Any) -> tuple[int, int]:
    """(masks whose predicted entity equals the answer's, masks)."""
    mapping = cloze_mapping(prediction)
    if mapping is None:
        return 0, len(reference)
    return sum(key in mapping and mapping[key] == value for key, value in reference.items()), len(reference)


def partial_match(reference: dict[str, str], prediction: Any) -> tuple[int, int]:
    """(masks whose predicted entity shares a whitespace token with the answer's, masks). A predicted
    entity that is not a string (LooGLE's code stops on it) shares none."""
    mapping = cloze_mapping(prediction)
    if mapping is None:
        return 0, len(reference)
    shared = sum(
        key in mapping
        and isinstance(mapping[key], str)
        and bool(set(value.split()) & set(mapping[key].split()))
        for key, value in reference.items()
    )
    return shared, len(reference)
