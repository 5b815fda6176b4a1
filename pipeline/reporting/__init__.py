"""What is built from artifacts and results for people to read and share: the leaderboard and its
correlations with benchmarks, the key-token page, Hub datasets, reproducible refreshes.

``common`` holds what they share: number formats, Markdown and CSV tables, figures, correlations.
"""
