"""The results files the commands append to and the leaderboard reads: whole-line appends and
validated reads (``lines``), and one schema per kind of line: ``scores`` (``scores.jsonl``, `make
score`), ``forgetting`` (``forgetting.jsonl``), ``ladder`` (``ladder.jsonl``); and lm-eval results
files read as score lines (``lmeval``).

Layer: contract. May import: the foundation (``errors``, ``files``, ``formats``, ``provenance``,
``hub``, ``cli``), the settings (``definition``, ``settings``), the inputs (``text``, ``models``) and
the contract layer (``artifact``, ``results``); never a stage, the API or a report.
"""
