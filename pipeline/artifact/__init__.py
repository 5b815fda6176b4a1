"""The key-token artifact, the contract between the two stages: its schema, version and contents hash
(``schema``), the files that hold its tables (``shards``: one per table, or shards cut at document
boundaries), its two identities (``identity``: the exact contents, and the same artifact recomputed
elsewhere), the checks of its contents (``checks``, ``token_checks``) and against the inputs it was made
from (``inputs``: the evaluator's tokenizer, the source texts), the optional question tables of a
corpus with questions (``qa``: their checks, and each question with its located evidence), reading from
any location with every check (``reader``: memory, a directory or ``hf://datasets/...``), crash-safe
and resumable writing (``writer``) and the one-run-per-artifact lock (``lock``).

Layer: contract. May import: the foundation (``errors``, ``files``, ``formats``, ``provenance``,
``hub``, ``cli``), the settings (``definition``, ``settings``), the inputs (``text``, ``models``) and
the contract layer (``artifact``, ``results``); never a stage, the API or a report.
"""
