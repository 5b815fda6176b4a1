"""Tests of ``pipeline.sharing``: publishing an artifact and refreshing the leaderboard."""
