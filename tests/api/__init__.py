"""Tests of ``pipeline.api``: the Python API (score, find_key_tokens, the drop-in, the callback) and what
it refuses."""
