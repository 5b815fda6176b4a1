"""Stage 1, `make keytokens`: an evaluator reads a corpus and writes the key-token artifact, its tasks
run by datatrove's executors. ``selection`` (which documents, their exact texts and evaluator tokens,
the settings record and fingerprint), ``plan`` (each task's documents, balanced by tokens, as shards),
``executors`` (where the tasks run: local, Slurm, Ray; their settings, checked), ``step`` (one task: the
evaluator loaded, its documents written as parts), ``tables`` (one document's long and short log-probs,
key tokens and spans, as table rows), ``stage`` (the run from its plan to its artifact: the tasks, the
merge). Its job is ``pipeline.jobs.keytokens``, its command ``pipeline.commands.keytokens``.

Layer: stages. May import: the foundation, settings, inputs (``text``, ``models``) and contract
(``artifact``, ``results``) layers and the other stages; never the API, a report or a command.
"""
