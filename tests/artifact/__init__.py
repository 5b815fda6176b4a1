"""Tests of ``pipeline.artifact``: the key-token artifact's checks, its two identities, its inputs, kinds
and lock."""
