"""The lab's studies, apart from the product (``pipeline/``): ``validation`` (`make validate`: do the
paper's claims hold with the embedded models?), ``longce`` (`make longce-demo`: CE against LongCE), the
rehearsals of the GPU runs on the CPU (``rehearse_paper``, ``rehearse_long``, their checks
``rehearsal_checks``), two readings of measured files (``cross_cpu``: two CPUs' artifacts against the
tolerance; ``ladder_family``: the ladder's lengths against validate's family), and the small-model builder
the tests and benches share (``random_models``).
Each make target of a study runs its module here (``studies.validate``, ``studies.longce_demo``,
``studies.rehearse_paper``, ``studies.rehearse_long``).

Layer: lab, above the product. May import: ``pipeline`` (any layer), ``studies`` and the bench's
measuring base (``bench.runner``, ``bench.shared``); never ``bench``'s cases nor ``tests``.
"""
