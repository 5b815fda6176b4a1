"""Tests of ``pipeline.text``: corpora and the alignment of key spans across tokenizers."""
