"""The tests, one folder per package they test (as ``pipeline/``, ``studies/`` and ``bench/`` are laid
out), and ``support``: the one module that test modules share. Imported first, so the Hub stays offline
for every test, whatever the environment says."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
