"""Tests of ``pipeline.commands``: every command's bad input as one error line, and the settings it passes
on."""
