"""The forgetting curve of a causal LM (Liu et al., EMNLP 2024; `make forgetting-curve MODEL=...`).

For each test length L of a grid, R seeded samples of a target S (L tokens) and an irrelevant text
I (L tokens) give two teacher-forced inputs, ``[bos] S [bos] S [eos]`` (copy) and
``[bos] I [bos] S [eos]`` (LM); an accuracy is the fraction of top-1 hits over the second half of
the second S, its last ceil(L/2) tokens. From the mean curves: the fine-grained memory length (the
largest L with copy accuracy > 99%) and the coarse-grained one (the largest L with copy accuracy at
least 1 point above LM accuracy), as the paper's Table 3. Conventions, as the reference code
(1azybug/ForgettingCurve, draw.py) unless said:

- L counts the tokens of S (the copy distance); an input has 2L + 3 tokens (2L + 2 without an EOS).
- Corpus source: every document tokenized alone (no special tokens), concatenated in corpus order
  (N tokens). S starts uniformly in [0, N - 3L]; I is the corpus's last L tokens, the same for
  every sample, so S and I never overlap. Random source: S and I uniform over the model's ordinary
  (non-special) token ids, drawn afresh per sample.
- Samples of length L come from ``numpy.random.default_rng([seed, L])``: a point does not depend
  on the other points of the grid.
- Per length: mean and population std (ddof=0) of the R accuracies per setting, and the two-sided
  paired t-test of copy against LM (scipy.stats.ttest_rel); all differences zero gives p = 1.
- Deliberate differences: BOS and EOS are the model's own (the reference hard-codes Llama-2's 1
  and 2); a model without BOS gets its EOS; a length beyond the claimed context is an error unless
  ``beyond_context=true`` (then scored and marked); a length that fails is recorded with its error
  and the run goes on, then ends with an error (the reference stops at the first exception).

The package: ``samples`` (the grid, special tokens, text, seeded samples, inputs, scored positions;
no model runs there), ``curve`` (accuracies, statistics, memory lengths). One run (its settings
resolved against the model, the picture, the results line ``pipeline.results.forgetting``) is the job
``pipeline.jobs.forgetting``; its command is ``pipeline.commands.forgetting_curve``
(``conf/forgetting/``).

Layer: stages. May import: the foundation, settings, inputs (``text``, ``models``) and contract
(``artifact``, ``results``) layers and the other stages; never the API, a report or a command.
"""
