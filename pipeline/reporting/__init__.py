"""What is built from artifacts and results for people to read and share: the leaderboard and its
correlations with benchmarks, the key-token page, Hub datasets, reproducible refreshes.

``common`` holds what they share: percentages, Markdown and CSV tables, figures, correlations.

Layer: reports. May import: every layer (foundation, settings, inputs, contract, stages, api) and the
reports layer (``reporting``, ``validation``). Only the commands' shells (``__main__``) sit above it.
"""
