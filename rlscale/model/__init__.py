"""Decoder-only transformer (Qwen3 / Qwen2 / Llama), its configuration and HF checkpoints."""
from rlscale.model.config import ModelConfig, RopeScaling, tiny_config
from rlscale.model.hf_checkpoint import load_hf_checkpoint, load_hf_config, save_hf_checkpoint
from rlscale.model.attention import (AttentionSegments, cache_segments, dense_mask,
                                     positions_from_segments, segments_from_mask)
from rlscale.model.transformer import (KVCache, ModelOutput, Transformer, forward, init_cache,
                                       init_params, positions_from_mask, tempered_log_softmax,
                                       token_logp)
