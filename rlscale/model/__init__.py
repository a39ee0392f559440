"""Decoder-only transformer (Qwen3 / Qwen2 / Llama) and its configuration."""
from rlscale.model.config import ModelConfig, tiny_config
from rlscale.model.transformer import (KVCache, ModelOutput, Transformer, causal_attention_mask,
                                       forward, init_cache, init_params, positions_from_mask,
                                       token_logp)
