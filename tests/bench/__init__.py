"""Tests of ``bench/``: the benchmarks' harness, report pages, GPU benches and memory measurement."""
