"""What is rendered from artifacts and results for people to read: the leaderboard (``board``,
``leaderboard``, ``loogle_board``) and its correlations with benchmarks, the key-token pages
(``keytoken_page``), the forgetting curve's and the ladder's plots. It only renders: Hub datasets and
refreshes are ``pipeline.sharing``, the commands ``pipeline.commands``.

``common`` holds what they share: percentages, Markdown and CSV tables, figures, correlations.

Layer: reports. May import: every layer below (foundation, settings, inputs, contract, stages, api)
and ``reporting``; never a study or a command.
"""
