"""Jobs: one run of a command, typed settings in and a result out (its results lines and what its
summary shows). ``recipe`` is the one function that runs any job: the output checks, the offline
rule, the model checked, the inputs opened, the model loaded, the measurement, each results line
appended, the warnings. One module per kind of job, named after its concept: ``score`` (`make
score`, ``pipeline.api.score``), ``ladder``, ``forgetting``, ``loogle`` (`make loogle`), ``texts``
(lm-eval's requests).

Layer: jobs. May import: the foundation, settings, inputs, contract, reports and stages layers, and
``pipeline.jobs``.
"""
