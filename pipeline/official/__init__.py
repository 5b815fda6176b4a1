"""The paper's own key tokens (the official LongPPL repository's span files) as key-token artifacts.

``span_files`` reads and writes the official span format (numbers only, never ``eval``); ``sources``
pins the dataset and tokenizers (Hub commit or local copy); ``boundaries`` checks that the spans fit
the reconstructed texts; ``run`` is the import (`make import-official EVALUATOR=<name>`,
``pipeline.commands.import_official``), which writes a ``key_spans`` artifact (``pipeline.artifact.schema``).

Layer: stages. May import: the foundation, settings, inputs (``text``, ``models``) and contract
(``artifact``, ``results``) layers and the other stages; never the API or a report.
"""
