"""Tests of ``pipeline.score``: stage 2 on tiny models, and bits per byte."""
