"""The context ladder: the score stage at growing context limits, and the effective context length.

``settings`` (the ladder's typed settings), ``engine`` (the rungs' passes, built from the score stage's
functions), ``effective`` (the effective length and its bootstrap interval), ``run`` (the results
line). Its command is ``pipeline.commands.ladder`` (`make ladder`).

Layer: stages. May import: the foundation, settings, inputs (``text``, ``models``) and contract
(``artifact``, ``results``) layers and the other stages (the score engine); never the API, a report
or a command.
"""
