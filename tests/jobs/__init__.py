"""Tests of ``pipeline.jobs``: the one recipe every job goes through."""
