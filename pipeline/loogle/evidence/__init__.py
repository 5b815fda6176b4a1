"""LooGLE's evidence (each string located in its document by ``pipeline.text.locating``):
``alignment_report`` (the located counts per task and rule), ``keytoken_rates``
(an artifact's LSD and key tokens inside the evidence against outside) and ``answer_gain`` (how much the
document helps a model predict a long-dependency question's answer).

Layer: stages. May import: the foundation, settings, inputs and contract layers, and ``pipeline.loogle``.
"""
