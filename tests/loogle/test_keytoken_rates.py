"""Key tokens against LooGLE's evidence (``pipeline.loogle.evidence.keytoken_rates``,
``make loogle-keytokens``): the circular-shift null on masks where the answer is known, tokens marked in
evidence by character overlap, evidence beyond the kept text counted and left out, and the one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pipeline.artifact.qa import ArtifactQuestion, Evidence
from pipeline.artifact.reader import iter_documents, load_artifact
from pipeline.errors import PipelineError
from pipeline.loogle.evidence.keytoken_rates import (
    EvidenceSettings,
    overlap_mask,
    permutation_test,
    shifted_sums,
    used_evidence,
)
from tests.support import compose_config, compose_keytokens, keytokens_overrides, run_keytokens

FILLER = "The committee met in the old hall and talked about the roads, the school and the harvest. "
TEXT = (
    "Gamma Mill was built in 1850 by the river. "
    + FILLER * 2
    + "The mill burned in 1901 and was rebuilt in stone. "
    + FILLER * 3
    + "In 2010 the mill became a library for the town."
)
FIRST = "Gamma Mill was built in 1850 by the river."
MIDDLE = "The mill burned in 1901 and was rebuilt in stone."
LAST = "In 2010 the mill became a library for the town."


def test_shifted_sums_are_those_of_each_rolled_mask():
    rng = np.random.default_rng(1)
    values, mask = rng.normal(size=37), rng.random(37) < 0.3
    expected = [values[np.roll(mask, s)].sum() for s in range(37)]
    assert np.allclose(shifted_sums(values, mask), expected, atol=1e-12)


def block_mask(n: int, start: int, length: int) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[start : start + length] = True
    return mask


def test_a_planted_difference_is_found_and_no_difference_is_not():
    rng = np.random.default_rng(7)
    settings = EvidenceSettings(shifts=2000, seed=3)
    values = [rng.normal(size=3000), rng.normal(size=2000)]
    masks = [block_mask(3000, 1200, 80), block_mask(2000, 300, 50)]
    plain = permutation_test(values, masks, settings)
    assert plain["p_greater"] > 0.05 and plain["p_two_sided"] > 0.05
    assert (plain["n_inside"], plain["n_outside"]) == (130, 4870)
    planted = [v + 0.8 * m for v, m in zip(values, masks, strict=True)]
    found = permutation_test(planted, masks, settings)
    assert found["p_greater"] < 0.01 and found["p_two_sided"] < 0.01
    assert found["difference"] == pytest.approx(plain["difference"] + 0.8, abs=1e-9)
    inside = np.concatenate([v[m] for v, m in zip(planted, masks, strict=True)])
    assert found["inside_mean"] == pytest.approx(inside.mean())
    lowered = permutation_test([-v for v in planted], masks, settings)
    assert lowered["p_greater"] > 0.99 and lowered["p_two_sided"] < 0.01
    again = permutation_test(planted, masks, settings)
    assert again == found  # seeded


def test_tokens_are_in_evidence_when_they_share_a_character():
    starts, ends = np.array([0, 3, 5, 9, 12]), np.array([3, 5, 9, 12, 15])
    assert overlap_mask(starts, ends, [(5, 9)], 15).tolist() == [False, False, True, False, False]
    assert overlap_mask(starts, ends, [(4, 10), (14, 15)], 15).tolist() == [False, True, True, True, True]
    assert not overlap_mask(starts, ends, [], 15).any()


def question(*evidence: Evidence) -> ArtifactQuestion:
    return ArtifactQuestion("doc", 0, "longdep_qa", "t#0", None, "q", "a", evidence)


def test_evidence_beyond_the_kept_text_is_counted_and_left_out():
    kept = Evidence("x", "exact", ((0, 10),), 1, None)
    beyond = Evidence("y", "elided", ((5, 10), (95, 105)), 1, None)
    lost = Evidence("z", "unlocated", (), 0, None)
    used, counts = used_evidence([question(kept, beyond, lost)], {"doc": 100})
    assert counts == {"strings": 3, "unlocated": 1, "beyond_kept_text": 1, "used": 1}
    assert used == {("doc", 0): [((0, 10),)]}


@pytest.fixture(scope="module")
def mill_artifacts(tmp_path_factory, tiny_model_dir) -> dict[str, Path]:
    """Two LooGLE artifacts of one document: whole, and cut inside its first sentence, before the end of
    any of its evidence (max_tokens=17)."""
    folder = tmp_path_factory.mktemp("loogle-mill")
    pairs = [
        {"Q": "What happened to it?", "A": "a library", "S": [FIRST, LAST], "type": "timeline_reorder"},
        {"Q": "When did it burn?", "A": "1901", "S": [MIDDLE, "Nothing of this is in the text."]},
    ]
    row = {"title": "Gamma", "input": TEXT, "output": None, "qa_pairs": repr(pairs)}
    (folder / "longdep_qa.jsonl").write_text(json.dumps(row) + "\n")
    out = {}
    for name, limit in (("whole", 500), ("cut", 17)):
        root = tmp_path_factory.mktemp(f"artifact-{name}")
        overrides = [
            o for o in keytokens_overrides(tiny_model_dir, "unused", root) if not o.startswith("corpus")
        ]
        overrides = [o for o in overrides if not o.startswith("max_tokens")] + [f"max_tokens={limit}"]
        corpus = ["corpus=loogle_sample", f"corpus.loogle={folder}", "corpus.tasks=[longdep_qa]"]
        run_keytokens(compose_keytokens([*overrides, *corpus]))
        out[name] = root / "test"
    return out


def run_command(artifact: Path, tmp_path: Path, *extra: str) -> dict:
    from pipeline.commands.loogle_keytokens import run

    overrides = [f"artifact={artifact}", f"out={tmp_path / 'out.json'}", "shifts=500", *extra]
    return run(compose_config("loogle_keytokens", overrides))


def test_the_command_counts_tokens_in_evidence_and_writes_json_and_plot(mill_artifacts, tmp_path):
    result = run_command(mill_artifacts["whole"], tmp_path)
    assert json.loads((tmp_path / "out.json").read_text()) == result
    assert (tmp_path / "out.png").read_bytes()[:4] == b"\x89PNG"
    assert result["evidence"] == {"strings": 4, "unlocated": 1, "beyond_kept_text": 0, "used": 3}
    artifact = load_artifact(mill_artifacts["whole"])
    assert artifact.documents["truncated"].to_pylist() == [False]
    (doc,) = iter_documents(artifact)
    spans = [(TEXT.index(s), TEXT.index(s) + len(s)) for s in (FIRST, MIDDLE, LAST)]
    scored = [i for i in range(len(doc.lsd)) if not np.isnan(doc.lsd[i])]
    inside = [
        i for i in scored if any(doc.eval_offsets[i][0] < e and doc.eval_offsets[i][1] > s for s, e in spans)
    ]
    assert (result["lsd"]["n_inside"], result["lsd"]["n_outside"]) == (len(inside), len(scored) - len(inside))
    assert result["lsd"]["inside_mean"] == pytest.approx(np.mean(doc.lsd[inside]))
    (row,) = result["dependency"]["questions"]  # only the first question has two used strings
    first = min(i for i in range(len(doc.lsd)) if doc.eval_offsets[i][1] > spans[0][0])
    last = min(i for i in range(len(doc.lsd)) if doc.eval_offsets[i][1] > spans[2][0])
    assert (row["question_index"], row["distance_tokens"]) == (0, last - first)
    fewer = run_command(mill_artifacts["whole"], tmp_path, "first_window=false")
    assert fewer["lsd"]["n_inside"] + fewer["lsd"]["n_outside"] < len(scored)


def test_bad_input_is_one_error(mill_artifacts, tiny_artifact, tmp_path):
    with pytest.raises(PipelineError, match="none of its 4 evidence strings is located inside the kept text"):
        run_command(mill_artifacts["cut"], tmp_path)
    with pytest.raises(PipelineError, match="has no questions"):
        run_command(tiny_artifact, tmp_path)
    with pytest.raises(PipelineError, match="shifts=0"):
        run_command(mill_artifacts["whole"], tmp_path, "shifts=0")
