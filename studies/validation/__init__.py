"""`make validate`: do the paper's claims hold with the embedded models? (docs/reports/validation.md)

``synthetic`` (seeded LongEval-style retrieval documents), ``options`` (the study's typed settings),
``family`` (the model family and its evaluators; ``shared_passes``: its members scored against every
evaluator with one pass per text), ``study`` (the measurements), ``loogle_target``
(LooGLE's long-dependency questions), ``figures``, ``report`` and ``loogle_report`` (the page, prose in
``report.md.j2``), ``claims`` (the run). Its command is ``studies.validate``.

Layer: lab (studies). May import: ``pipeline`` (any layer) and ``studies``.
"""
