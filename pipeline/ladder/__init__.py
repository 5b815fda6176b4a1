"""The context ladder: the score stage at growing context limits, and the effective context length.

``settings`` (the ladder's typed settings), ``engine`` (the rungs and their passes, one call of the
score engine, ``pipeline.score.engine.score_limits``), ``effective`` (the effective length and its
bootstrap interval), ``run`` (the results line). Its command is ``pipeline.commands.ladder``
(`make ladder`).

Layer: stages. May import: the foundation, settings, inputs (``text``, ``models``) and contract
(``artifact``, ``results``) layers and the other stages (the score engine's calls and result types);
never the API, a report or a command.
"""
