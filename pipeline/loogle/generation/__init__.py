"""LooGLE's generation: ``decoding`` (the prompt cut to its first and last halves in tokens, greedy
decoding with its repetition penalty), ``answering`` (one task's predictions, each written at once and
resumable), ``predictions`` (this project's predictions files and the repository's ``Output/`` format)
and ``benchmark`` (every task of a run for one model).

Layer: stages. May import: the foundation, settings, inputs and contract layers, and ``pipeline.loogle``.
"""
