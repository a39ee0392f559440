"""Autoregressive sampling: the bucketed, jitted `Sampler` on a device mesh (`sampler`), the decode
core it runs (`decode`: KV-cached `generate`, `Rollout`) and sampling strategies (greedy,
temperature, top-k, top-p, min-p)."""
from rlscale.sampler.decode import (DecodeState, Rollout, check_prompts, check_special_ids,
                                    generate, map_rollout, pad_to_bucket)
from rlscale.sampler.sampler import Sampler
from rlscale.sampler.strategies import (SamplingConfig, filter_logits, first_argmax, min_p_filter,
                                        sample_token, top_k_filter, top_p_filter)
