"""Tests of ``pipeline.training``: LongCE fine-tuning."""
