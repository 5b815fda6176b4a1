"""`make longce-demo`: does LongCE beat CE here? ``experiment`` (SmolLM2-135M fine-tuned with CE and
with LongCE from the same checkpoint, on the CPU) and ``longce_report`` (its page,
``docs/reports/longce-demo.md``, prose in ``longce_report.md.j2``). Its command is
``studies.longce_demo``.

Layer: lab (studies). May import: ``pipeline`` (any layer) and ``studies``.
"""
