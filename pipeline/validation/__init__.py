"""`make validate`: do the paper's claims hold with the embedded models? (docs/reports/validation.md)

``synthetic`` (seeded LongEval-style retrieval documents), ``study`` (the measurements), ``figures``,
``report`` (the page, prose in ``report.md.j2``), ``run`` (the run).

Layer: reports. May import: every layer (foundation, settings, inputs, contract, stages, api) and the
reports layer (``reporting``, ``validation``). Only the commands' shells (``__main__``) sit above it.
"""
