"""`make validate`: do the paper's claims hold with the embedded models? (docs/reports/validation.md)

``synthetic`` (seeded LongEval-style retrieval documents), ``settings`` (the study's typed settings),
``family`` (the model family and its evaluators), ``study`` (the measurements), ``figures``,
``report`` (the page, prose in ``report.md.j2``), ``run`` (the run); ``longce_demo`` and
``longce_report``: `make longce-demo`, CE against LongCE. Their commands are ``pipeline.commands.validate``
and ``pipeline.commands.longce_demo``.

Layer: studies. May import: every layer below (foundation, settings, inputs, contract, stages, api,
reports) and the studies (``validation``, ``sharing``); never a command.
"""
