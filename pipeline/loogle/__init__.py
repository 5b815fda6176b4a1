"""LooGLE (Li et al. 2023), the long-context benchmark, with its own protocol and metrics.

- ``data``, ``sources``: its questions in either Hub layout (``qa_pairs`` read as a literal, never run),
  from the embedded Wikipedia sample (``data/loogle``), a local copy, or the Hub dataset at its pinned
  revision; a fingerprint of each task's questions;
- ``prompts``, ``generation``: its prompts, the first-and-last-halves cut in tokens, greedy decoding
  with its repetition penalty and generation lengths;
- ``predictions``: this project's predictions files (resumable, written atomically) and the repository's
  ``Output/`` format;
- ``metrics``, ``scoring``, ``reorder``: its automatic metrics as its evaluation code computes them, and
  the timeline-reorder metrics;
- ``wordnet``: WordNet for nltk's METEOR from Debian's packages, offline;
- ``evidence``: each question's evidence strings located in its document as character spans;
- ``corpus``: its distinct documents as a key-token corpus (``corpus=loogle_sample``, ``corpus=loogle``),
  with each document's questions and located evidence, which stage 1 writes beside the key tokens;
- their commands are in ``pipeline.commands``: ``loogle`` (`make loogle`), ``loogle_metrics``
  (`make loogle-metrics`) and ``loogle_evidence`` (`make loogle-evidence`).

Layer: stages. May import: the foundation, settings, inputs and contract layers, and ``pipeline.loogle``.
"""
