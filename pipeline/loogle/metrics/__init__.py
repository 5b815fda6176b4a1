"""LooGLE's metrics as its evaluation code computes them: ``similarity`` (BLEU, ROUGE, METEOR,
BERTScore, the cloze matches), ``task_scores`` (a task's predictions scored), ``reorder`` (the
timeline-reorder metrics), ``wordnet`` (WordNet for METEOR, offline) and ``evaluation`` (a predictions
file evaluated against its questions).

Layer: stages. May import: the foundation, settings, inputs and contract layers, and ``pipeline.loogle``.
"""
