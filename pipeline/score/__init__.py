"""Stage 2, `make score`: one causal LM scored against a key-token artifact with one forward pass per
document (or windows of ``context_limit`` tokens). ``documents`` (one document: tokens, log-probs and
every metric's sums), ``sums`` (the metrics' sufficient statistics and how documents pool; the
metrics themselves are declared in ``pipeline.metric_registry``), ``bpb`` (bits per byte), ``engine``
(the score call that every way in makes, and ``score_texts``: the documents at several context limits
at once, the ladder's rungs). Its command is ``pipeline.commands.score``.

Layer: stages. May import: the foundation, settings, inputs (``text``, ``models``) and contract
(``artifact``, ``results``) layers and the other stages; never the API, a report or a command.
"""
