"""Tests of ``pipeline.results``: the results files."""
