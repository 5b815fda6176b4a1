"""Texts and their tokens: corpora of long documents taken exactly as stored (``corpus``: the shipped
GovReport sample, local files, Hub datasets, the paper's pre-tokenized texts), tokenization with
character offsets that must reproduce the text (``tokenization``), and key spans carried from the
evaluator's tokens onto another tokenizer's (``alignment``, paper Eq. 9 and 10), and LooGLE's evidence
strings located in their texts as character spans (``locating``).

Layer: inputs. May import: the foundation (``errors``, ``files``, ``formats``, ``provenance``,
``hub``, ``cli``), the settings (``definition``, ``settings``) and the inputs layer (``text``,
``models``); never the artifact, results, a stage, the API or a report.
"""
