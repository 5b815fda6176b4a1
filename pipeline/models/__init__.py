"""Models, whatever their source, and what is computed from them: loading any causal LM and its
tokenizer with provenance (``loading``; embedded short names, directories, ``.gguf`` files checked
and converted once by ``gguf`` and read through a view of exactly the conversion's recorded files,
``conversion_view``, Hub ids), whether a tokenizer is the model's (``pairing``), where its
parts compute (``placement``), exact block-sparse attention (``attention``), target log-probs in
bounded chunks with no full-vocabulary logits (``logprobs``, ``float32_head``), top-1 predictions
(``top1``), how far two correct computations may differ (``precision``) and seeded random-weight
models for the tests and benchmarks (``random_weights``).

Layer: inputs. May import: the foundation (``errors``, ``files``, ``formats``, ``provenance``,
``hub``, ``cli``), the settings (``definition``, ``settings``) and the inputs layer (``text``,
``models``); never the artifact, results, a stage, the API or a report.
"""
