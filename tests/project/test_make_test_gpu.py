"""`make test-gpu` on a machine without CUDA fails at once instead of passing with every test skipped."""

from __future__ import annotations

import subprocess

import pytest
import torch

from tests.support import ROOT


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA")
def test_make_test_gpu_without_cuda_exits_non_zero():
    proc = subprocess.run(["make", "-s", "test-gpu"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "error: make test-gpu needs a CUDA GPU and a CUDA build of torch" in proc.stderr
    assert "nothing was tested" in proc.stderr and "passed" not in proc.stdout
