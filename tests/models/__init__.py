"""Tests of ``pipeline.models``: loading, attention, log-probs, precision, placement and a model's
identity."""
