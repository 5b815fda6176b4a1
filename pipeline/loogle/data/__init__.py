"""LooGLE's data and protocol: ``questions`` (a question, both layouts, literals read never run),
``reading`` (where they come from: the sample, a folder or the Hub; each task's fingerprint),
``prompts`` (its templates and generation lengths, a prompt split around its text) and
``keytoken_corpus`` (its distinct documents as a key-token corpus, with their questions and evidence).

Layer: stages. May import: the foundation, settings, inputs and contract layers, and ``pipeline.loogle``.
"""
