"""Tests of ``pipeline.loogle``: LooGLE's data, generation, metrics and evidence."""
