"""Benchmarks (`make bench`, `make bench-quick`, `make bench-memory`, `make bench-stage2`); run as
``python -m bench.<name>`` from the repository root."""
