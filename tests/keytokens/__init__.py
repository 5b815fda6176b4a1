"""Tests of ``pipeline.keytokens``: stage 1 end to end, its resume, its ranks and its presets."""
