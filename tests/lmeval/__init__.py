"""Tests of ``pipeline.lmeval``: LongPPL and LooGLE inside lm-evaluation-harness."""
