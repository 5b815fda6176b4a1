"""LooGLE (Li et al. 2023), the long-context benchmark, with its own protocol and metrics, grouped by what
LooGLE is:

- ``data``: its data and protocol: questions in either Hub layout (``qa_pairs`` read as a literal, never
  run), read from the embedded Wikipedia sample (``data/loogle``), a local copy, or the Hub dataset at its
  pinned revision, with a fingerprint of each task's questions; its prompts and generation lengths; its
  distinct documents as a key-token corpus (``corpus=loogle_sample``, ``corpus=loogle``);
- ``generation``: the first-and-last-halves cut in tokens, greedy decoding with its repetition penalty,
  the predictions files (resumable, written atomically) and the repository's ``Output/`` format, and the
  run of its tasks for one model;
- ``metrics``: its automatic metrics as its evaluation code computes them, the timeline-reorder metrics,
  WordNet for METEOR, a predictions file evaluated;
- ``evidence``: each question's evidence strings located in its document as character spans, the key
  tokens inside that evidence against outside, and the answer gain of its long-dependency questions.

Layer: stages. May import: the foundation, settings, inputs and contract layers, and ``pipeline.loogle``.
"""
