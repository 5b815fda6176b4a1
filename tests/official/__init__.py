"""Tests of ``pipeline.official``: importing the paper's key spans."""
