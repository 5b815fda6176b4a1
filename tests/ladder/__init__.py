"""Tests of ``pipeline.ladder``: the context ladder on tiny models."""
