"""Models that cannot be loaded: a file that is no model, a GGUF header that lies, a folder without a
tokenizer, a pickle that would run code, a mistyped name, a Hub model out of reach (at once, not after
minutes of retries), a URL given as a path. Each is one ``error:`` line (one PipelineError in the API)
before any slow work."""

from __future__ import annotations

import os
import pickle
import re
import shutil
import struct
import subprocess
import sys

import pytest

from pipeline.errors import PipelineError
from tests.support import ROOT, cli, job, messages


class RunsCode:
    """A pickle that would create a directory when unpickled without weights_only."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def model_folders(tiny_model_dir, tmp_path) -> dict[str, str]:
    """Model specs that cannot load, by case."""
    fake, header = tmp_path / "fake.gguf", tmp_path / "header.gguf"
    fake.write_text("not a model\n")
    header.write_bytes(struct.pack("<4sIQQ", b"GGUF", 3, 2**64 - 1, 2**64 - 1))  # counts no file holds
    no_tokenizer, pickled = tmp_path / "no-tokenizer", tmp_path / "pickled"
    no_tokenizer.mkdir()
    shutil.copy(tiny_model_dir / "config.json", no_tokenizer)
    shutil.copy(tiny_model_dir / "model.safetensors", no_tokenizer)
    shutil.copytree(tiny_model_dir, pickled, ignore=shutil.ignore_patterns("*.safetensors"))
    with open(pickled / "pytorch_model.bin", "wb") as handle:
        pickle.dump({"w": RunsCode(str(tmp_path / "code-ran"))}, handle)
    specs = {"fake": fake, "header": header, "no_tokenizer": no_tokenizer, "pickled": pickled}
    return {case: str(path) for case, path in specs.items()} | {"typo": "smollm2-13m", "hub": "org/name"}


def test_models_that_cannot_load(tiny_model_dir, tiny_artifact, tmp_path):
    specs = model_folders(tiny_model_dir, tmp_path)
    done = cli(
        "pipeline.commands.score", "--multirun", "model=local", "model.spec=" + ",".join(specs.values()),
        "device=cpu,tpu", f"artifact={tiny_artifact}", f"results={tmp_path / 's.jsonl'}", "progress=false",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )  # fmt: skip
    found = messages(done.stderr)
    assert len(found) == 2 * len(specs)
    by_case = {case: job(found, "device=cpu", f"model.spec={spec}") for case, spec in specs.items()}
    assert {job(found, "device=tpu", f"model.spec={spec}") for spec in specs.values()} == {
        "setting device='tpu': not a device: use auto, cpu, cuda or cuda:<index>"
    }
    assert by_case["fake"] == (
        f"{specs['fake']} is not a GGUF file (it does not start with the bytes 'GGUF'): pass a .gguf model "
        "file, a checkpoint directory or a Hub id"
    )
    assert "its GGUF header claims 18446744073709551615 tensors" in by_case["header"]
    assert by_case["no_tokenizer"].startswith(f"{specs['no_tokenizer']} has no tokenizer (no tokenizer.json")
    assert "a pickled checkpoint (.bin) that holds more than tensors, refused" in by_case["pickled"]
    assert not (tmp_path / "code-ran").exists()
    assert by_case["typo"] == (
        "unknown model 'smollm2-13m': not a local path, not an embedded model (gemma3-270m, smollm2-135m; "
        "did you mean smollm2-135m?), and not loadable from the Hugging Face Hub (HF_HUB_OFFLINE=1 is set "
        "and it is not in the local Hub cache)"
    )
    assert by_case["hub"].startswith(
        "could not load 'org/name' from the Hugging Face Hub (HF_HUB_OFFLINE=1 is set and it is not in the "
        "local Hub cache): on a machine with network access run `hf download org/name --local-dir DIR`"
    )
    assert not (tmp_path / "s.jsonl").exists()


# The score command, timed from the end of its imports (torch and transformers take seconds, more on
# a busy machine) to its exit: the part a Hub check could spend waiting.
AFTER_IMPORTS = """
import sys, time
from pipeline.commands.score import main
started = time.monotonic()
sys.argv = ["pipeline.commands.score", *sys.argv[1:]]
try:
    main()
finally:
    print(f"seconds after imports: {time.monotonic() - started:.2f}", file=sys.stderr)
"""


def test_a_hub_model_out_of_reach_fails_at_once(tmp_path):
    """A mistyped model name and a Hub id, offline (HF_HUB_OFFLINE=1) and with the Hub unreachable
    (an endpoint that refuses connections): one error line each, well within 10 s of the imports
    (it was 47 s of download retries and 46 warning lines)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env |= {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    for offline in ("1", "0"):
        done = subprocess.run(
            [sys.executable, "-c", AFTER_IMPORTS, "--multirun", "model.spec=smollm2-13m,org/name",
             f"hydra.sweep.dir={tmp_path / offline}"],
            cwd=ROOT, env={**env, "HF_HUB_OFFLINE": offline}, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 2 and "Traceback" not in done.stderr and "Retry" not in done.stderr
        found = messages(done.stderr)
        why = "HF_HUB_OFFLINE=1 is set" if offline == "1" else "the Hub could not be reached ("
        assert len(found) == 2 and all(why in message for message in found.values()), found
        seconds = float(done.stderr.rsplit("seconds after imports: ", 1)[1])
        assert seconds < 10, seconds  # both models


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("hf://models/org/name", "model.spec=org/name$"),
        ("HF://org/name@abc123", "model.spec=org/name with revision=abc123$"),
        ("s3://bucket/model", "pass a checkpoint directory, a .gguf file or a Hub model id"),
    ],
)
def test_a_model_given_as_a_url_is_not_a_local_path(spec, said):
    from pipeline.models.loading import load_model

    with pytest.raises(PipelineError, match=f"^model {re.escape(spec)} is a URL, not a path: .*{said}"):
        load_model(spec, device="cpu")
