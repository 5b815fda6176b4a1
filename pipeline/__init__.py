"""LongPPL: perplexity on the tokens that need long context (Fang et al., ICLR 2025)."""

__version__ = "0.1.0"
