"""`make longce-demo`'s parts (``studies.longce``): its documents, seeded and held out, and its report."""

from __future__ import annotations

import re

from tests.support import compose_config


def test_demo_documents_are_seeded_and_held_out_ones_are_new():
    from pipeline.commands.shell import plain
    from pipeline.settings import parse
    from studies.longce import experiment as longce_demo

    cfg = plain(compose_config("longce_demo", ["train_documents=3", "eval_documents=2"]))
    cfg = parse(longce_demo.DemoOptions, cfg)
    train, held_out = longce_demo.documents(cfg)
    assert [d.id for d in train] == ["longeval-00", "longeval-01", "longeval-02"]
    assert [d.id for d in held_out] == ["longeval-03", "longeval-04"]
    assert longce_demo.documents(cfg) == (train, held_out)
    assert not {d.text for d in train} & {d.text for d in held_out}


def test_demo_report_has_the_numbers_and_a_relative_picture(tmp_path):
    from studies.longce import longce_report

    def evaluation(acc):
        return {"token_accuracy": acc, "answer_exact_match": 0.25, "answer_ppl": 2.0, "other_ppl": 1.5,
                "ppl": 20.0, "longppl": 9.0 - acc, "longppl_soft": 19.0, "n_answer_tokens": 40}  # fmt: skip

    def run(acc, w):
        curve = [{"step": s, "loss": 1.5 - 0.1 * s, "ce": 1.2 - 0.1 * s, "weight_mean": w, "weight_max": 5.0,
                  "clamped_fraction": 0.03, "learning_rate": 1e-4, "seconds": s} for s in (1, 2)]  # fmt: skip
        return {"steps": 2, "tokens_per_step": 1200.0, "seconds_per_step": 10.0,
                "cpu_seconds_per_step": 20 * w, "curve": curve, "after": evaluation(acc)}  # fmt: skip

    results = {"before": evaluation(0.5), "ce": run(0.6, 1.0), "self": run(0.75, 1.2)}
    results["settings"] = {"model": "m", "steps": 2, "learning_rate": 1e-4, "warmup_steps": 1, "K": 8, "d": 8,
                           "gamma": 5.0, "seed": 0, "train_documents": 2, "lines": 10, "questions": 2,
                           "min_gap_lines": 4, "eval_documents": 1, "govreport_documents": 1,
                           "govreport": "g", "dtype": "float32"}  # fmt: skip
    assert longce_report.curves_png(results).startswith(b"\x89PNG")
    timing = {"training": {"wall": 10.0, "cpu": 18.0}, "total": {"wall": 60.0, "cpu": 600.0}}
    text = longce_report.render(
        results, timing, tmp_path / "docs" / "longce-demo", tmp_path / "docs" / "longce-demo.md"
    )
    assert "![training curves](longce-demo/curves.png)" in text
    assert re.search(r"- \*\*Code\*\* commit \S+.*, \d{4}-\d\d-\d\d\.\n", text)  # which code, which day
    assert "| after LongCE (self) | 75.0% |" in text and "| after CE | 60.0% |" in text
    assert "Larger gain: **LongCE (self)** (difference +15.0 points" in text
    assert "1.20x the CPU time of a CE step" in text and "5 minutes" in text
    assert "Reduced settings" not in text
    results["changed_from_defaults"] = {"steps": 2}
    assert "**Reduced settings** (steps=2;" in longce_report.render(
        results, timing, tmp_path, tmp_path / "r.md"
    )
