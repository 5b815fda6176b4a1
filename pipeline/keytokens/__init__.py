"""Stage 1, `make keytokens`: an evaluator reads a corpus and writes the key-token artifact. ``settings``
(the run's typed settings), ``documents`` (which documents, their exact texts and evaluator tokens, the
fingerprint), ``tables`` (one document's long and short log-probs, key tokens and spans, as table
rows), ``ranks`` (data parallelism under ``torchrun`` or Slurm), ``run`` (the run: resume, parts, the
finished artifact). Its command is ``pipeline.commands.keytokens``.

Layer: stages. May import: the foundation, settings, inputs (``text``, ``models``) and contract
(``artifact``, ``results``) layers and the other stages; never the API, a report or a command.
"""
