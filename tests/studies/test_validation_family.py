"""`make validate`'s model family on tiny models: members from the config, a second evaluator's
artifact built on the same texts, every number equal to the score stage's, and a whole run twice."""

from __future__ import annotations

import copy
import json

import pytest

from pipeline.commands.score import run as run_score
from pipeline.commands.shell import plain
from pipeline.errors import PipelineError
from studies.validate import run as run_validation
from studies.validate import settings
from studies.validation import family, synthetic
from studies.validation.claims import load
from tests.support import compose_config, save_tiny_model, validate_config


def validate_settings(tmp_path, *overrides):
    """The study's typed settings, as `make validate` gives them."""
    return settings(plain(validate_config(tmp_path, *overrides)))


def test_members_from_the_config(tmp_path, tiny_model_dir):
    checkpoint = f"checkpoints=[{{spec: '{tiny_model_dir}', context_limit: 64, label: tuned}}]"
    members = family.members(validate_settings(tmp_path, checkpoint))
    labels = [m.label for m in members]
    limits = ("W=256", "W=1024", "W=2048", "full")
    assert labels == [f"{m} {w}" for m in ("smollm2-135m", "gemma3-270m") for w in limits] + ["tuned"]
    assert [m.checkpoint for m in members] == [False] * 8 + [True]
    assert members[-1].choice.spec == str(tiny_model_dir) and members[-1].context_limit == 64
    assert members[0].choice.attn_implementation == "blocked_sdpa"  # the conf/model/ group, composed
    unnamed = family.members(
        validate_settings(tmp_path, "members=[]", f"checkpoints=[{{spec: '{tiny_model_dir}'}}]")
    )
    assert unnamed[0].label == f"{tiny_model_dir.parent.name}/{tiny_model_dir.name} full"
    bad = {
        "members=[{model: smollm2-135m},{model: smollm2-135m}]": "share the label",
        "members=[{context_limit: 4}]": "exactly one of `model`",
        f"members=[{{model: smollm2-135m, spec: '{tiny_model_dir}'}}]": "exactly one of `model`",
        f"checkpoints=[{{spec: '{tmp_path / 'nothing'}'}}]": "no checkpoint at",
    }
    for override, message in bad.items():
        with pytest.raises(PipelineError, match=message):
            family.members(validate_settings(tmp_path, override))


@pytest.fixture(scope="module")
def synthetic_docs():
    return synthetic.make_corpus(0, 1, n_lines=8, n_questions=2, min_gap_lines=2)


def family_overrides(tiny_artifact, tiny_model_dir, other_model_dir) -> list[str]:
    return [
        f"govreport={tiny_artifact}",
        "govreport_documents=3",
        f"members=[{{spec: '{other_model_dir}', context_limit: 32, label: other-32}},"
        f"{{spec: '{other_model_dir}', label: other-full}}, {{spec: '{tiny_model_dir}', label: tiny-full}}]",
        f"evaluators=[{{artifact: '{tiny_artifact}', label: tiny}},"
        f"{{evaluator: local, spec: '{other_model_dir}', label: other}}]",
    ]


def test_family_numbers_equal_the_score_stage(
    tmp_path, tiny_artifact, tiny_model_dir, other_model_dir, synthetic_docs
):
    cfg = validate_settings(tmp_path, *family_overrides(tiny_artifact, tiny_model_dir, other_model_dir))
    evals = family.evaluators(cfg, tmp_path / "work")
    assert [(e.label, e.built) for e in evals] == [("tiny", False), ("other", True)]
    assert (
        evals[1].spec == str(other_model_dir)
        and evals[1].artifact.root.parent == tmp_path / "work" / "keytokens"
    )
    assert [d.text for d in evals[1].documents] == [d.text for d in evals[0].documents]
    for key in family.REFERENCE_SETTINGS:
        assert evals[1].artifact.settings[key] == evals[0].artifact.settings[key]
    members = family.members(cfg)
    timing: dict[str, float] = {}
    rows = family.score_family(cfg, members, synthetic_docs, evals, lambda c: load(c, cfg.compute), timing)
    assert set(timing) == {
        f"member {m}{part}" for m in ("other-32", "other-full", "tiny-full") for part in ("", " GovReport")
    }
    own = {r["label"]: [e for e, v in r["evaluators"].items() if v["self_evaluation"]] for r in rows}
    assert own == {"other-32": ["other"], "other-full": ["other"], "tiny-full": ["tiny"]}
    for m, row in zip(members, rows, strict=True):
        limit = [] if m.context_limit is None else [f"context_limit={m.context_limit}"]
        for ev in evals:
            stage = run_score(compose_config("score", [
                "model=local", f"model.spec={m.choice.spec}", f"artifact={ev.artifact.root}",
                f"results={tmp_path / 'scores.jsonl'}", "dtype=float64", "device=cpu", "progress=false",
                "head_chunk=16", "window_batch_tokens=16384", *limit,
            ]))["corpus"]  # fmt: skip
            for key in ("ppl", "bpb", "n_tokens", "n_bytes"):
                assert row[key] == pytest.approx(stage[key], rel=1e-12), (m.label, ev.label, key)
            values = row["evaluators"][ev.label]
            for key in family.EVALUATOR_VALUES:
                assert values[key] == pytest.approx(stage[key], rel=1e-12), (m.label, ev.label, key)
    assert rows[0]["ppl"] != rows[1]["ppl"]  # the context limit counts
    record = family.evaluator_record(evals[1])
    assert record["built"] and 0 < record["key_tokens"] < record["evaluator_tokens"]


def test_evaluator_on_other_texts_is_an_error(
    tmp_path, tiny_artifact, tiny_model_dir, other_model_dir, write_corpus
):
    from tests.support import compose_keytokens, keytokens_overrides, run_keytokens

    corpus = write_corpus([{"id": "doc-0", "text": "Some other text entirely. " * 10}])
    run_keytokens(compose_keytokens(keytokens_overrides(tiny_model_dir, corpus, tmp_path, "name=other")))
    overrides = family_overrides(tiny_artifact, tiny_model_dir, other_model_dir)[:3]
    cfg = validate_settings(
        tmp_path,
        *overrides,
        f"evaluators=[{{artifact: '{tiny_artifact}'}}, {{artifact: '{tmp_path / 'other'}'}}]",
    )
    with pytest.raises(PipelineError, match="has another text for document 'doc-0'"):
        family.evaluators(cfg, tmp_path / "work")


def test_validate_runs_twice_with_equal_results(
    tmp_path,
    tiny_artifact,
    tiny_model_dir,
    other_model_dir,
    tokenizer,
    whole_loogle_artifact,
):
    """The whole `make validate` on tiny models: results.json, report and pictures; the second run
    rebuilds every artifact and compares equal. Its LooGLE target reads a tiny LooGLE artifact."""
    part1 = save_tiny_model(
        tmp_path / "part1", tokenizer, max_positions=2048
    )  # the synthetic documents' evaluator
    cfg = validate_config(
        tmp_path,
        *family_overrides(tiny_artifact, tiny_model_dir, other_model_dir),
        "govreport_documents=1",
        f"members=[{{spec: '{other_model_dir}', context_limit: 32, label: other-32}}]",
        f"checkpoints=[{{spec: '{tiny_model_dir}', label: tiny-full}}]",
        "evaluator=local",
        f"evaluator.spec='{part1}'",
        "documents=1",
        "lines=8",
        "questions=2",
        "min_gap_lines=3",
        "K=16",
        "d=16",
        f"loogle.artifact='{whole_loogle_artifact}'",
    )
    first = run_validation(cfg)
    assert [(r["label"], r["checkpoint"]) for r in first["family"]] == [
        ("other-32", False),
        ("tiny-full", True),
    ]
    assert set(first["correlations"]) == set(first["ranking"]) == {"tiny", "other"}
    assert first["govreport"]["documents"] == ["doc-0"]
    docs = tmp_path / "docs"
    assert all(
        (docs / f"family-{m}.png").exists() for m in ("ppl", "longppl", "longppl_soft", "bpb", "key_bpb")
    )
    second = run_validation(cfg)
    assert second == first == json.loads((docs / "results.json").read_text())
    text = (tmp_path / "validation.md").read_text()
    assert "**`results.json` is identical to the previous run's**" in text
    assert "## Closing note: does LongPPL rank this family better than PPL?" in text
    assert "| tiny-full | **self** |" in text
    loogle = {r["label"]: r["loogle"] for r in first["family"]}
    assert (loogle["other-32"]["n_no_evidence"], loogle["other-32"]["n_no_room"]) == (1, 2)
    assert loogle["tiny-full"]["self_evaluation"] and loogle["tiny-full"]["limit"] == 512
    assert loogle["tiny-full"]["n_counted"] == 2 and loogle["tiny-full"]["gain_nats"] is not None
    assert first["loogle"]["questions"] == 3 and (docs / "loogle-gain.png").exists()
    assert "## 4. A second target: LooGLE's long-dependency questions" in text
    # loogle.only=true: the LooGLE target alone, into the same results.json; every other number kept
    again = copy.deepcopy(cfg)
    again.loogle.only, again.loogle.count, again.loogle.min_questions = True, "some", 1
    only = run_validation(again)
    assert {k: v for k, v in only.items() if k != "loogle"} == {
        k: v for k, v in first.items() if k not in ("loogle", "family")
    } | {
        "family": [{**r, "loogle": o["loogle"]} for r, o in zip(first["family"], only["family"], strict=True)]
    }
    assert only["loogle"]["count"] == "some" and only["loogle"]["correlations"]["min_questions"] == 1
    assert "which recomputed section 4 alone" in (tmp_path / "validation.md").read_text()
