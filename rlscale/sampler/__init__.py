"""Autoregressive sampling: jitted KV-cached `generate`, the bucketed pmapped `Sampler`, and sampling
strategies (greedy, temperature, top-k, top-p, min-p)."""
from rlscale.sampler.sampler import (DecodeState, Rollout, Sampler, check_prompts, check_special_ids,
                                     generate, pad_to_bucket)
from rlscale.sampler.strategies import (SamplingConfig, filter_logits, first_argmax, min_p_filter,
                                        sample_token, top_k_filter, top_p_filter)
