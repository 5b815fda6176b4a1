"""The context ladder: the score stage at growing context limits, and the effective context length.

``rungs`` (the ladder's typed settings, the rungs it picks and checks, scored by one call of the
score engine, ``pipeline.score.engine.score_texts``), ``effective`` (the effective length and its
bootstrap interval). One run (the picture, the results line) is the job ``pipeline.jobs.ladder``;
its command is ``pipeline.commands.ladder`` (`make ladder`).

Layer: stages. May import: the foundation, settings, inputs (``text``, ``models``) and contract
(``artifact``, ``results``) layers and the other stages (the score engine's calls and result types);
never the API, a report or a command.
"""
