"""Tests of ``pipeline.reporting``: the leaderboard and the key-token pages."""
