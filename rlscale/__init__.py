"""rlscale: when does a larger batch make LLM reinforcement learning reach a target sooner?

Kept import-light (no JAX here) so `python -m rlscale.verify` answers in about a second.
"""

__version__ = "0.1.0"
