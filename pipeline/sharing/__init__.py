"""Sharing what the pipeline makes: key-token artifacts as Hugging Face Hub datasets (``publish``: the
folder, its dataset card, the upload) and leaderboard refreshes that anyone can reproduce exactly from
recorded inputs (``refresh``: the pinned artifact checked, every pinned model scored again by the
score command, every recorded number compared). Their commands are ``pipeline.commands.publish`` and
``pipeline.commands.leaderboard_refresh``.

Layer: studies. May import: every layer below (foundation, settings, inputs, contract, stages, api,
reports) and the studies (``validation``, ``sharing``); never a command.
"""
