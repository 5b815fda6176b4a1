"""The benchmarks: one runner (``bench.runner``) and one case per module, ``bench/<name>.py`` run by
``make bench-<name>`` (``-`` for ``_``); docs/bench.md lists them. Run as ``python -m bench.<name>``
from the repository root."""
