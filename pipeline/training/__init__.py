"""Fine-tuning with LongCE, `make finetune`: the loss (``longce``: cross-entropy weighted by
min(exp(LSD), gamma), from the model itself, an artifact or all ones), training sequences from a
corpus (``sequences``), Hugging Face ``Trainer`` with that loss (``trainer``). One run with its typed
settings is the job ``pipeline.jobs.finetune``; its command is ``pipeline.commands.finetune``.

Layer: stages. May import: the foundation, settings, inputs (``text``, ``models``) and contract
(``artifact``, ``results``) layers and the other stages; never the API or a report.
"""
