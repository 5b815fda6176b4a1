"""The context ladder: the score stage at growing context limits, and the effective context length."""
