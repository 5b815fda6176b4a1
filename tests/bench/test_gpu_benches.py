"""What the GPU benchmarks (`make bench-gpu`, `make bench-gpu-levers`, `make bench-numerics`) do that a
CPU can run: the builders, every contender's process on a tiny model, the phase records and their
summary, the levers, the comparisons of artifacts and the report. (The runner's memory probes:
tests/test_bench_harness.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from argparse import Namespace

import pyarrow.parquet as pq
import pytest

from bench import gpu, gpu_child, gpu_levers, gpu_report, numerics, startup
from bench.runner import ROOT
from studies.rehearse_paper import trained_tokenizer
from tests.support import compose_keytokens, keytokens_overrides, run_keytokens


def test_summary_of_phase_records():
    events = [
        {"phase": "process", "start": 100.0, "end": 101.0},
        {"phase": "imports", "start": 101.0, "end": 106.0},
        {"phase": "model load", "start": 106.0, "end": 110.0},
        {"phase": "text", "start": 110.0, "end": 118.0},
        {"phase": "text", "start": 118.0, "end": 124.0},
        {"phase": "text", "start": 124.0, "end": 130.5},
        {"phase": "torch peak", "bytes": 3 * 2**30},
    ]
    s = gpu.summarise(events)
    assert s["text_s"] == [8.0, 6.0, 6.5] and s["first_text_s"] == 8.0 and s["steady_text_s"] == 6.25
    assert s["before_first_text_s"] == 10.0 and s["torch_peak_gib"] == 3.0
    assert s["phases_s"] == {"process": 1.0, "imports": 5.0, "model load": 4.0}
    assert gpu.startup({**s, "wall_s": 33.0}) == pytest.approx(33.0 - 3 * 6.25)


def test_contenders_run_the_paper_preset_on_the_same_texts(tmp_path):
    runs = gpu.contenders(tmp_path, 3, 131071, "cuda", [], float32=True)
    names = [r["name"] for r in runs]
    assert names[:4] == [
        "stage 1 (ours)",
        "find_key_token (official)",
        "stage 2 (ours)",
        "plain forward + float32 CE",
    ]
    stage1, official = runs[0]["child"], runs[1]["child"]
    assert stage1[0] == "stage1" and "preset=paper" in stage1 and "corpus.max_ids=131071" in stage1
    artifact = str(tmp_path / "keytokens" / "paper131071x3")
    assert f"name={'paper131071x3'}" in stage1 and official[official.index("--artifact") + 1] == artifact
    assert f"artifact={artifact}" in runs[2]["child"] and "add_bos=false" in runs[2]["child"]
    float32 = [r for r in runs if "stage 1 float32," in r["name"]]
    assert (
        "dtype=float16" in runs[-1]["child"] and runs[-1]["name"] == "stage 1 float16, float32 head, 1 text"
    )
    assert [("--tf32" in r["child"], "--sdpa-math" in r["child"]) for r in float32] == [
        (False, False),
        (True, False),
        (True, True),  # attention on the math backend in query blocks, as before 88746e2
    ]
    assert all("dtype=float32" in r["child"] and "corpus.limit=1" in r["child"] for r in float32)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """The whole bench on the CPU: a tiny Llama-3.1-shaped model, two texts of 600 reference tokens,
    every contender in its own process."""
    work = tmp_path_factory.mktemp("bench-gpu")
    tokenizer = work / "trained"
    trained_tokenizer(tokenizer, vocab_size=2000)
    built = gpu.build(work, texts=2, tokens=600, shape="tiny", device="cpu", tokenizer=tokenizer)
    args = Namespace(work=work, texts=2, tokens=600, device="cpu", overrides=["K=128", "d=64"], float32=False)
    args.budget, args.only, args.compile = 600, None, False
    return built, gpu.measure(args), work


def test_build_makes_the_dataset_and_a_llama31_shaped_model(measured):
    import transformers

    built, _, work = measured
    long_rows = [n for i, n in enumerate(built["dataset_lengths"]) if i != 1]
    assert len(long_rows) == 2 and built["dataset_lengths"][1] < 600 * 10 <= min(
        long_rows
    )  # one short report
    config = transformers.AutoConfig.from_pretrained(work / "model")
    assert config.rope_parameters["rope_type"] == "llama3" and config.max_position_embeddings == 131072
    assert config.vocab_size == 128256 and config.num_key_value_heads == 2


def test_every_contender_runs_and_times_each_text(measured):
    _, result, work = measured
    runs = {r["name"]: r for r in result["runs"]}
    assert set(runs) == {
        "stage 1 (ours)",
        "find_key_token (official)",
        "stage 2 (ours)",
        "plain forward + float32 CE",
    }
    for run in runs.values():
        assert run["returncode"] == 0, run.get("error")
        assert len(run["text_s"]) == 2 and run["steady_text_s"] > 0 and run["peak_gib"] > 0
        assert 0 < run["before_first_text_s"] < run["wall_s"]
        assert {"process", "imports", "model load"} <= set(run["phases_s"])
    assert {"self-check", "selection", "finalize"} <= set(runs["stage 1 (ours)"]["phases_s"])
    assert str(work) not in json.dumps(result) and str(ROOT) not in json.dumps(result)  # no machine path
    texts = pq.read_table(work / "keytokens/paper600x2/documents.parquet")["text"].to_pylist()
    assert len(texts) == 2 and all(len(t) > 1000 for t in texts)
    assert json.loads((work / "scores.jsonl").read_text().splitlines()[-1])["corpus"]["n_documents"] == 2


def numerics_result(artifact) -> dict:
    keys, spans, tokens = numerics.artifact_keys(artifact)
    row = {"name": "cpu float32 (reference)", "key_tokens": tokens, "spans": spans, "key_chars": len(keys)}
    other = {
        **row,
        "name": "cpu float32 again",
        "abs_diff": numerics.value_differences(artifact, artifact),
    }
    scores = [
        {"name": n, "ppl": 12.0, "longppl": 2.0, "longppl_soft": 11.0}
        for n in ("cpu float32", "cuda float32")
    ]
    machine = {"torch": "2", "transformers": "5", "date": "2026-11-26"}
    return {
        "bench": "gpu_numerics",
        "machine": machine,
        "stage1": [
            {**row, "jaccard": 1.0},
            {**other, "jaccard": 1.0},
            {
                "name": "cuda float16, float32 head",
                "error": "error: ... overflow in a 16-bit dtype?",
                "wall_s": 9,
            },
        ],
        "stage2": scores,
    }


def test_artifact_comparisons(tiny_artifact, tiny_model_dir, tmp_path):
    """Key characters and per-token differences: none against itself; some for the same run in
    float32 against the float64 fixture."""
    keys, spans, tokens = numerics.artifact_keys(tiny_artifact)
    assert len(keys) >= spans > 0 and tokens > 0
    assert numerics.value_differences(tiny_artifact, tiny_artifact) == {
        "lsd": [0.0] * 3,
        "lcl": [0.0] * 3,
    }
    corpus = tiny_artifact.parent / "corpus.jsonl"
    overrides = keytokens_overrides(tiny_model_dir, corpus, tmp_path)
    run_keytokens(compose_keytokens(["dtype=float32" if o.startswith("dtype=") else o for o in overrides]))
    diff = numerics.value_differences(tmp_path / "test", tiny_artifact)
    assert 0 < diff["lsd"][2] < 1e-2 and 0 < diff["lcl"][2] < 1e-2  # measured: 3.1e-4
    assert numerics.jaccard(keys, numerics.artifact_keys(tmp_path / "test")[0]) > 0.9


def test_report_has_every_contender_and_the_ratios(measured, tiny_artifact, tmp_path):
    _, result, _ = measured
    paper, numerics_file = tmp_path / "paper.json", tmp_path / "numerics.json"
    paper.write_text(json.dumps(result))
    numerics_file.write_text(json.dumps(numerics_result(tiny_artifact)))
    text = gpu_report.report([paper, numerics_file], tmp_path / "report.md")
    assert text.startswith("# Benchmarks on a GPU\n\nWhat this page is for")
    assert "## 600 tokens per text, 2 texts" in text
    ours = {line.split(" |")[0]: line for line in text.splitlines() if "(ours) |" in line}
    assert (
        "x the time," in ours["| stage 1 (ours)"]
        and "of find_key_token (official) |" in ours["| stage 1 (ours)"]
    )
    assert "of plain forward + float32 CE |" in ours["| stage 2 (ours)"]
    assert "No `make bench-numerics` result" not in text
    assert "No `make bench-numerics` result" in gpu_report.report([paper], tmp_path / "alone.md")
    assert "| cpu float32 again |" in text and "| cuda float32 | 12.0000 (+0.0e+00)" in text
    assert "| cuda float16, float32 head | | | | failed: error: ... overflow in a 16-bit dtype? |" in text


def test_the_child_times_a_function_as_a_phase(tmp_path):
    events = gpu_child.Events(tmp_path / "events.jsonl")

    class Owner:
        @staticmethod
        def work(x):
            return x + 1

    events.timed(Owner, "work", "text")
    assert Owner.work(1) == 2
    records = gpu.read_events(tmp_path / "events.jsonl")
    assert [r["phase"] for r in records] == ["process", "text"]
    assert records[0]["start"] <= records[0]["end"] <= records[1]["start"] <= records[1]["end"]


def test_the_machine_script_names_what_the_benches_read():
    """bench/gpu_machine.sh calls the benches with options they have."""
    script = (ROOT / "bench/gpu_machine.sh").read_text()
    for option in ("--tokenizer", "--texts", "--tokens", "--float32", "--budget", "--json", "--only"):
        assert option in script
    assert "--reference-scores" in script and "bench.numerics" in script and "bench.gpu_levers" in script
    assert "bench.gpu build" in script and "bench.gpu measure" in script
    assert "bench.startup --sizes paper" in script and "--compile" in script and "compile=on" in script


def test_compiled_contenders_start_cold_then_share_the_compile_cache(tmp_path):
    """With --compile, both stages again with the pipeline's compile=on: stage 1 first with an empty
    compile cache and an artifact of its own, then with the cache it filled; each compared with the
    uncompiled contender's measure (the official code, a plain forward)."""
    runs = {r["name"]: r for r in gpu.contenders(tmp_path, 2, 600, "cpu", [], False, True)}
    cold = runs["stage 1 compiled (ours), cold compile cache"]
    warm = runs["stage 1 compiled (ours), warm compile cache"]
    stage2 = runs["stage 2 compiled (ours), warm compile cache"]
    cache = str(tmp_path / "compile-cache")
    assert cold["env"]["TORCHINDUCTOR_CACHE_DIR"] == warm["env"]["TORCHINDUCTOR_CACHE_DIR"] == cache
    assert tmp_path / "compile-cache" in cold["fresh"] and tmp_path / "compile-cache" not in warm["fresh"]
    assert cold["child"][-1] == stage2["child"][-1] == "compile=on" and stage2["child"][0] == "stage2"
    assert cold["versus"] == "find_key_token (official)" and stage2["versus"] == "plain forward + float32 CE"
    (tmp_path / "compile-cache").mkdir()
    options = {"work": str(tmp_path), "texts": 2, "device": "cpu", "overrides": [], "float32": False}
    argv, env = gpu.command(cold["name"], 600, **options, compile=True)
    assert not (tmp_path / "compile-cache").exists() and env == cold["env"] and "compile=on" in argv


def test_every_stage1_contender_starts_without_its_artifact(tmp_path):
    """A finished artifact would be left untouched (no text measured) by a second measure in the same
    work folder; a contender that measured no text is compared with nothing."""
    runs = gpu.contenders(tmp_path, 2, 600, "cpu", [], True, True)
    stage1 = [r for r in runs if r["child"][0] == "stage1"]
    assert len(stage1) == 7 and all(len(r["fresh"]) >= 1 for r in stage1)
    artifact = tmp_path / "keytokens" / "paper600x2"
    artifact.mkdir(parents=True)
    options = {"work": str(tmp_path), "texts": 2, "device": "cpu", "overrides": [], "float32": False}
    gpu.command("stage 1 (ours)", 600, **options)
    assert not artifact.exists()
    measured = {"name": "stage 1 (ours)", "text_s": [2.0, 1.0], "first_text_s": 2.0, "steady_text_s": 1.0}
    official = {**measured, "name": "find_key_token (official)", "peak_gib": 1.0}
    assert gpu.versus({**measured, "peak_gib": 0.5}, official).startswith("1.00x the time, 0.50x")
    assert gpu.versus({"name": "stage 1 (ours)", "text_s": [], "peak_gib": 0.5}, official) == ""


def test_startup_stops_each_stage_at_its_first_text(measured, tmp_path):
    """bench.startup on the bench's tiny model: each stage run twice to its first text and stopped
    there, every phase with its wall and CPU seconds, the medians."""
    _, _, work = measured
    out = tmp_path / "startup.json"
    startup.main(["--sizes", "paper", "--device", "cpu", "--work", str(work), "--tokens", "600", "--texts",
                  "2", "--runs", "2", "--overrides", "K=128", "d=64", "--dir", str(tmp_path / "runs"),
                  "--json", str(out)])  # fmt: skip
    result = json.loads(out.read_text())
    assert [(r["stage"], r["size"]) for r in result["results"]] == [
        ("stage 1 (make keytokens)", "paper"),
        ("stage 2 (make score)", "paper"),
    ]
    for r in result["results"]:
        assert "error" not in r and len(r["runs"]) == 2 and r["median"]["reached_first_text"] == 2
        med = r["median"]
        assert med["before_first_text_cpu_s"] > 0
        assert 0 < med["phases_s"]["imports"] < med["before_first_text_s"]
        assert {"model load", "load: tokenizer", "self-check"} <= set(med["phases_cpu_s"])
    assert not list((tmp_path / "runs" / "keytokens").glob("*/manifest.json"))  # stopped before any text
    assert "**to the first text**" in "\n".join(startup.table(result))


def test_levers_time_stage_1_and_keep_its_numbers(measured, tmp_path):
    """bench.gpu_levers on the bench's own model and first text: every lever measured, the window
    batches and sdpa's flash kernel give the default run's numbers, the report renders it."""
    _, _, work = measured
    out = tmp_path / "levers.json"
    cmd = [sys.executable, "-m", "bench.gpu_levers", "--work", str(work), "--tokens", "600", "--texts", "2"]
    subprocess.run(
        [*cmd, "--device", "cpu", "--K", "128", "--d", "64", "--json", str(out)], cwd=ROOT, check=True
    )
    result = json.loads(out.read_text())
    rows = {r["lever"]: r for r in result["levers"]}
    assert {"long pass: body", "short windows: head", "short windows: body less its last layer"} <= set(rows)
    for name in ("window_batch_tokens=5120", "window_batch_tokens=65536", "sdpa kernel flash_attention"):
        assert rows[name]["max_abs_diff"] == 0.0 and rows[name]["seconds"] >= 0
    assert "failed: RuntimeError" in "\n".join(gpu_levers.section(result))  # cuDNN: no such kernel on the CPU
    assert result["load_direct_s"] >= 0 and result["load_ours_s"] > 0 and result["text_tokens"] == 600
    assert str(work) not in out.read_text() and str(ROOT) not in out.read_text()


def test_the_page_renders_the_h200_records_with_loogles_decoding(tmp_path):
    """The committed H200 records (bench.loogle_decode's file names no bench), the older ones named as
    superseded; the page as committed is this rendering."""
    records = ROOT / "docs/reports/benchmarks-gpu"
    files = [records / f"{name}-h200-803d062.json" for name in ("gpu-32767", "loogle-decode")]
    files += [records / f"{name}-h100.json" for name in ("gpu-131071", "levers", "numerics")]
    superseded = [records / "gpu-32767-h100.json", records / "gpu-32767-h200.json"]
    text = gpu_report.report(files, tmp_path / "page.md", superseded)
    assert "## LooGLE's decoding: 8 questions of one 32,000-token document, 129 new tokens" in text
    assert "own half after the cached shared half (prompt cut): 1.94 s, 1.44x a whole prefill" in text
    assert "superseded by these: `gpu-32767-h100.json`, `gpu-32767-h200.json`" in text
    assert text == (ROOT / "docs/reports/benchmarks-gpu.md").read_text()


def test_startup_keeps_within_its_budget_and_writes_what_it_measured(tmp_path):
    """Past its --budget bench.startup starts no more runs and still writes its file, each skipped run
    saying why (on the H200 the script killed it at its limit and nothing was written)."""
    out = tmp_path / "startup.json"
    startup.main(["--budget", "0", "--runs", "2", "--dir", str(tmp_path / "runs"), "--json", str(out)])
    result = json.loads(out.read_text())
    assert [r["median"]["runs"] for r in result["results"]] == [0, 0]
    assert all("out of time" in r["error"] for r in result["results"])
