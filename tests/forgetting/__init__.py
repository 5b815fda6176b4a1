"""Tests of ``pipeline.forgetting``: the forgetting curve on tiny models."""
